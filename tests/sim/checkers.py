"""The invariants, each a named function over the run's history (``Trace.history``).

* ``acked_entry_readable``: every acknowledged add is read back, with its bytes, by the final
  full read of its ledger (after every fault healed), unless the ledger was deleted.
* ``closed_ledger_covers_acks``: a closed ledger's last entry is >= every acknowledged id, and
  every entry up to it is readable (the final read got all of them).
* ``single_value_per_entry``: no two reads ever saw different bytes for one (ledger, entry).
* ``no_ack_after_fence``: an add invoked after a recovery of its ledger completed (the ledger was
  fenced by then) is never acknowledged, unless the ledger was deleted.
* ``lac_monotonic``: the LACs one tailing reader observes never go backwards.
* ``tail_in_order``: ``ReadHandle.tail`` delivers consecutive entries from where it started.
* ``lost_bookie_rereplicated``: after a bookie is lost for good, re-replication (run again once
  every other fault healed) succeeds and no ledger names the lost bookie any more.
* ``liveness``: once faults healed, every operation ends within the bound (virtual time).
* ``budgets_drained``: once every client has gone, each running bookie's byte budgets (adds in
  progress and unanswered, read answers) hold nothing and have no one waiting: whatever a
  request reserved came back, however its stream or connection ended. The add port's receive
  budget counts too, and no add-port connection is still open.
* ``journal_rules_kept``: with the real journal (``journal_disk``), the loop never writes
  or syncs a journal file while the journal's writer is writing or syncing it, and batches
  reach the file in the order they were submitted.
* ``add_port_clean``: the bookies' add ports never closed a connection or ended a stream for a
  fault in what the (well-behaved) clients sent: a bad preface, a frame over the limit or cut
  wrong, a message that does not parse. Allowed: the timeouts a partition can cause (a preface or
  frame held up longer than its timeout), and connections refused at the connection limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .trace import HistoryOp


@dataclass(frozen=True)
class Violation:
    checker: str
    message: str
    ledger: int = -1
    entry: int = -1

    def __str__(self) -> str:
        return f"[{self.checker}] {self.message}"


@dataclass
class Final:
    """What the final phase established: per ledger, its closed last entry and the full read."""

    closed_last: dict[int, int]  # ledger -> last entry id, from the metadata after the final recovery
    final_reads: dict[int, dict[int, bytes]]  # ledger -> entry -> bytes, the checker's full read
    unreadable: dict[int, str]  # ledger -> why the final recovery/read failed
    deleted: set[int]
    stuck: list[str]  # operations / tasks still running past the liveness bound
    rereplicated: bool | None = None  # the final re-replication of lost bookies succeeded (None: none lost)
    still_naming_lost: list[int] = field(default_factory=list)  # ledgers naming a lost bookie after it
    # "bookie: budget" -> what it still held once every client had gone (bytes, waiting requests)
    budgets_held: dict[str, str] = field(default_factory=dict)
    # bookie -> the faults its add port closed a connection or ended a stream for, over the run
    add_port_faults: dict[str, list[str]] = field(default_factory=dict)
    # writes and syncs the loop made while the journal's writer held its files, over the run
    journal_breaches: list[str] = field(default_factory=list)


def _acked(history: Sequence[HistoryOp]) -> list[HistoryOp]:
    return [h for h in history if h.f == "add" and h.kind == "ok"]


def acked_entry_readable(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    out = []
    for ack in _acked(history):
        if ack.ledger in final.deleted:
            continue
        if ack.ledger in final.unreadable:
            out.append(
                Violation(
                    "acked_entry_readable",
                    f"L{ack.ledger} e{ack.entry} acknowledged, but the "
                    f"ledger could not be read: {final.unreadable[ack.ledger]}",
                    ack.ledger,
                    ack.entry,
                )
            )
            continue
        got = final.final_reads.get(ack.ledger, {}).get(ack.entry)
        if got != ack.value:
            out.append(
                Violation(
                    "acked_entry_readable",
                    f"L{ack.ledger} e{ack.entry} acknowledged as {ack.value!r}, read back {got!r}",
                    ack.ledger,
                    ack.entry,
                )
            )
    return out


def closed_ledger_covers_acks(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    out = []
    top: dict[int, int] = {}
    for ack in _acked(history):
        top[ack.ledger] = max(top.get(ack.ledger, -1), ack.entry)
    for h in history:  # every close / recovery result, not only the final one
        if h.kind == "ok" and h.f in ("close", "recover") and h.ledger not in final.deleted:
            acked = top.get(h.ledger, -1)
            if h.value < acked:
                out.append(
                    Violation(
                        "closed_ledger_covers_acks",
                        f"L{h.ledger} closed at {h.value} by "
                        f"{h.process} ({h.f}) but e{acked} was acknowledged",
                        h.ledger,
                        acked,
                    )
                )
    for ledger, last in final.closed_last.items():
        if ledger in final.deleted or ledger in final.unreadable:
            continue
        if last < top.get(ledger, -1):
            out.append(
                Violation(
                    "closed_ledger_covers_acks",
                    f"L{ledger} closed at {last} (final recovery) but e{top[ledger]} was acknowledged",
                    ledger,
                    top[ledger],
                )
            )
        missing = [e for e in range(last + 1) if e not in final.final_reads.get(ledger, {})]
        if missing:
            out.append(
                Violation(
                    "closed_ledger_covers_acks",
                    f"L{ledger} closed at {last} but entries {missing[:10]} are unreadable",
                    ledger,
                    missing[0],
                )
            )
    return out


def single_value_per_entry(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    seen: dict[tuple[int, int], tuple[bytes, str]] = {}
    out = []
    reads = [
        (h.ledger, h.entry, h.value, h.process) for h in history if h.f == "read-entry" and h.kind == "ok"
    ]
    reads += [
        (lid, e, data, "final")
        for lid, entries in sorted(final.final_reads.items())
        for e, data in sorted(entries.items())
    ]
    for ledger, entry, data, who in reads:
        first = seen.setdefault((ledger, entry), (data, who))
        if first[0] != data:
            out.append(
                Violation(
                    "single_value_per_entry",
                    f"L{ledger} e{entry}: {first[1]} read {first[0]!r}, {who} read {data!r}",
                    ledger,
                    entry,
                )
            )
    return out


def no_ack_after_fence(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    fenced_at: dict[int, int] = {}
    for h in history:
        if h.f == "recover" and h.kind == "ok":
            fenced_at.setdefault(h.ledger, h.time_us)
    invoked: dict[tuple[str, int, int], int] = {}
    out = []
    for h in history:
        if h.f != "add":
            continue
        key = (h.process, h.ledger, h.entry)
        if h.kind == "invoke":
            invoked[key] = h.time_us
        elif h.kind == "ok" and h.ledger not in final.deleted:
            # A deleted ledger's fence goes with it: a bookie that garbage-collected the ledger
            # takes a late writer's adds as a new ledger (BookKeeper does the same).
            fence = fenced_at.get(h.ledger)
            start = invoked.get(key)
            if fence is not None and start is not None and start > fence:
                out.append(
                    Violation(
                        "no_ack_after_fence",
                        f"L{h.ledger} e{h.entry} invoked at "
                        f"{start / 1e6:.6f}s after the fence at {fence / 1e6:.6f}s, yet acknowledged",
                        h.ledger,
                        h.entry,
                    )
                )
    return out


def lac_monotonic(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    last: dict[tuple[str, int, int], int] = {}  # (process, ledger, tail id) -> highest LAC seen
    out = []
    for h in history:
        if h.f == "lac" and h.kind == "ok":
            tail_id, lac = h.value
            key = (h.process, h.ledger, tail_id)
            if lac < last.get(key, -1):
                out.append(
                    Violation(
                        "lac_monotonic",
                        f"{h.process} (tail {tail_id}) saw the LAC of "
                        f"L{h.ledger} go from {last[key]} to {lac}",
                        h.ledger,
                    )
                )
            last[key] = max(last.get(key, -1), lac)
    return out


def tail_in_order(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    return [
        Violation(
            "tail_in_order",
            f"{h.process} tail {h.value[0]} of L{h.ledger} got e{h.entry} when e{h.value[1]} was next",
            h.ledger,
            h.entry,
        )
        for h in history
        if h.f == "follow-gap"
    ]


def lost_bookie_rereplicated(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    if final.rereplicated is None:
        return []
    if not final.rereplicated:
        why = [h.value for h in history if h.process == "admin-final" and h.kind == "fail"]
        return [Violation("lost_bookie_rereplicated", f"re-replication of the lost bookie failed: {why}")]
    return [
        Violation("lost_bookie_rereplicated", f"L{lid} still names a lost bookie after re-replication", lid)
        for lid in final.still_naming_lost
    ]


def liveness(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    return [Violation("liveness", f"still running after faults healed: {what}") for what in final.stuck]


def budgets_drained(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    return [
        Violation("budgets_drained", f"{where} still held {what} once every client had gone")
        for where, what in sorted(final.budgets_held.items())
    ]


# What a well-behaved client's connection may be closed for: a partition that holds its bytes
# past a timeout, or the connection limits (a client has no say in how many connections others have).
_ALLOWED_FAULTS = ("no preface within", "a frame not received whole within", "refused a connection from")


def add_port_clean(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    return [
        Violation("add_port_clean", f"{bookie}'s add port: {fault}")
        for bookie, faults in sorted(final.add_port_faults.items())
        for fault in faults
        if not any(allowed in fault for allowed in _ALLOWED_FAULTS)
    ]


def journal_rules_kept(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    return [Violation("journal_rules_kept", breach) for breach in final.journal_breaches]


CHECKERS: dict[str, Callable[[Sequence[HistoryOp], Final], list[Violation]]] = {
    f.__name__: f
    for f in (
        acked_entry_readable,
        closed_ledger_covers_acks,
        single_value_per_entry,
        no_ack_after_fence,
        lac_monotonic,
        tail_in_order,
        lost_bookie_rereplicated,
        liveness,
        budgets_drained,
        add_port_clean,
        journal_rules_kept,
    )
}


def check(history: Sequence[HistoryOp], final: Final) -> list[Violation]:
    out: list[Violation] = []
    for checker in CHECKERS.values():
        out.extend(checker(history, final))
    return out
