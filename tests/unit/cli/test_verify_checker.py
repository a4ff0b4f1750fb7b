"""The verify checker over hand-made histories: each invariant it states catches its violation,
and a sound history passes; the same for named logs (batches committed once, in order, whole).
Payloads name their own position."""

from __future__ import annotations

import random
from typing import Any

from pybk.verify.checker import (
    AFTER_FENCE,
    CLOSE_MISMATCH,
    CORRUPT,
    DIVERGENT,
    LOST,
    TAIL_GAP,
    TRUNCATED,
    CheckResult,
    check,
    history_around,
)
from pybk.verify.history import Event, make_payload, parse_payload, payload_problem
from pybk.verify.log_workload import DUPLICATE, REFUSED_VISIBLE, check_logs

T0 = 1_000.0


def ev(t: float, p: str, f: str, op: str, **fields: Any) -> Event:
    return {"t": T0 + t, "p": p, "f": f, "op": op, **fields}


def sound_history(entries: int = 3) -> list[Event]:
    """writer-0 writes ledger 7 and closes it; the tailer and the final read see every entry."""
    out = [ev(0, "writer-0.1", "ok", "create", l=7, E=3, Qw=2, Qa=2)]
    for e in range(entries):
        out.append(ev(1 + e, "writer-0.1", "ok", "add", l=7, e=e, s=e, h=f"h{e}", ms=1.0))
        out.append(ev(1.5 + e, "tailer-0.1", "ok", "read", l=7, e=e, h=f"h{e}", src="tail"))
    out.append(ev(10, "writer-0.1", "ok", "close", l=7, last=entries - 1))
    out.append(ev(20, "final", "ok", "final-open", l=7, last=entries - 1, fragments=1))
    out += [ev(21 + e, "final", "ok", "read", l=7, e=e, h=f"h{e}", src="final") for e in range(entries)]
    return out


def kinds(history: list[Event]) -> list[str]:
    return sorted(v.kind for v in check(history).violations)


def test_a_sound_history_passes_and_is_counted() -> None:
    result = check(sound_history())
    assert result.violations == []
    assert result.acknowledged == 3 and result.ledgers == 1
    assert result.reads == {"tail": 3, "final": 3}


def test_an_acknowledged_entry_the_final_read_misses_is_lost() -> None:
    history = [e for e in sound_history() if not (e["p"] == "final" and e.get("e") == 1)]
    assert kinds(history) == [LOST]


def test_a_ledger_closed_before_an_acknowledged_entry_is_truncated() -> None:
    history = sound_history()
    for e in history:
        if e["op"] in ("final-open", "close"):
            e["last"] = 1
    history = [e for e in history if not (e["p"] == "final" and e.get("e") == 2)]
    assert kinds(history) == [TRUNCATED]


def test_other_bytes_than_acknowledged_are_divergent_once_per_disagreement() -> None:
    history = sound_history()
    for e in history:
        if e["p"] == "final" and e.get("e") == 0:
            e["h"] = "other"
    # the final read differs from the acknowledgement and from the tailer
    assert kinds(history) == [DIVERGENT, DIVERGENT]


def test_an_acknowledgement_past_a_recovery_is_caught_as_after_fence() -> None:
    history = sound_history()
    history.append(ev(5, "recoverer-0.1", "ok", "recover", l=7, last=1))
    for e in history:
        if e["op"] in ("final-open", "close"):
            e["last"] = 1
    assert AFTER_FENCE in kinds(history) and TRUNCATED in kinds(history)


def test_two_closers_that_disagree_are_reported() -> None:
    history = sound_history()
    history.append(ev(5, "recoverer-0.1", "ok", "recover", l=7, last=5))
    assert kinds(history) == [CLOSE_MISMATCH]


def test_a_tailer_that_skips_an_entry_is_a_tail_gap() -> None:
    history = [e for e in sound_history() if not (e["p"] == "tailer-0.1" and e.get("e") == 1)]
    assert kinds(history) == [TAIL_GAP]


def test_a_read_whose_payload_names_another_position_is_corrupt() -> None:
    history = sound_history()
    history.append(ev(30, "final", "ok", "read", l=8, e=0, h="x", src="final", bad="payload says ledger 7"))
    assert kinds(history) == [CORRUPT]


def test_the_history_around_a_violation_keeps_its_ledger_life_and_neighbours() -> None:
    history = [e for e in sound_history(10) if not (e["p"] == "final" and e.get("e") == 5)]
    (lost,) = check(history).violations
    around = history_around(history, lost, entries=1)
    assert {e["op"] for e in around} >= {"create", "close", "final-open"}
    assert {e["e"] for e in around if "e" in e} == {4, 5, 6}


def test_payloads_name_their_position_and_catch_damage() -> None:
    data = make_payload("writer-1.2", 42, 7, random.Random(1), 100)
    info = parse_payload(data)
    assert info is not None
    assert (info.writer, info.ledger_id, info.seq, info.intact) == ("writer-1.2", 42, 7, True)
    assert payload_problem(data, 42, 7) is None
    assert payload_problem(data, 42, 8) == "payload says ledger 42 entry 7"
    assert payload_problem(data[:-1] + bytes([data[-1] ^ 1]), 42, 7) == "filler CRC mismatch"
    assert payload_problem(b"something else", 42, 7) == "not a verify payload"


def log_history() -> list[Event]:
    """logger-0 commits versions 0 and 1 (one segment each); the final read finds both."""
    return [
        ev(0, "logger-0.1", "invoke", "log-commit", log="L", version=0, write="w0"),
        ev(1, "logger-0.1", "ok", "log-commit", log="L", version=0, write="w0", committed=True,
           segments=[[11, 3, "d11"]]),
        ev(2, "logger-0.1", "invoke", "log-commit", log="L", version=1, write="w1"),
        ev(3, "logger-0.1", "ok", "log-commit", log="L", version=1, write="w1", committed=True,
           segments=[[12, 2, "d12"]]),
        ev(9, "final", "ok", "final-log", log="L", segments=[[11, 3, "d11", "w0"], [12, 2, "d12", "w1"]]),
    ]


def log_kinds(history: list[Event]) -> list[str]:
    result = CheckResult()
    check_logs(history, result)
    return sorted(v.kind for v in result.violations)


def test_named_log_batches_committed_once_in_order_pass() -> None:
    result = CheckResult()
    check_logs(log_history(), result)
    assert result.violations == [] and result.log_commits == 2


def test_a_committed_batch_missing_from_the_log_is_lost() -> None:
    history = log_history()
    history[-1]["segments"] = history[-1]["segments"][:1]
    assert log_kinds(history) == [LOST]


def test_a_replayed_batch_held_twice_is_a_duplicate() -> None:
    history = log_history()
    history.append(ev(4, "logger-0.1", "invoke", "log-commit", log="L", version=1, write="w1b"))
    history[-2]["segments"].append([13, 2, "d13", "w1b"])
    assert log_kinds(history) == [DUPLICATE]


def test_a_refused_batch_must_not_be_visible() -> None:
    history = log_history()
    history.append(ev(5, "logger-0.1", "ok", "log-commit", log="L", version=1, write="w1c", committed=False,
                      segments=[[14, 1, "d14"]]))
    history[-2]["segments"].append([14, 1, "d14", "w1c"])
    assert REFUSED_VISIBLE in log_kinds(history)
