"""The checker: what the whole history of a verify run must satisfy.

Over the writers' acknowledgements (``ok add``), every reader's observations (tailers, recovery
openers, the final read), the recoveries and closes:

* **lost**: an acknowledged entry that the final read of its ledger cannot return;
* **truncated**: a ledger closed (by whoever closed it) before one of its acknowledged entries;
* **divergent**: one (ledger, entry) read with two different contents, or read with other bytes
  than were acknowledged;
* **acked-after-fence**: a writer acknowledged an entry past the point a recovery opener closed
  its ledger at (the fence did not hold);
* **close-mismatch**: two closers of one ledger disagree on its last entry;
* **corrupt**: bytes that are not what any writer could have put at that position;
* **tail-gap**: a tailing reader saw its ledger other than as 0, 1, 2, ... (a gap, a repeat, a jump).

Crashes and a cluster that does not heal are found by the run itself and added to the same list.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pybk.verify.history import OK, Event

LOST = "lost"
TRUNCATED = "truncated"
DIVERGENT = "divergent"
AFTER_FENCE = "acked-after-fence"
CLOSE_MISMATCH = "close-mismatch"
CORRUPT = "corrupt"
TAIL_GAP = "tail-gap"
CRASH = "crash"
UNHEALTHY = "unhealthy"
READ_SOURCES = ("tail", "recover", "final")


@dataclass
class Violation:
    kind: str
    detail: str
    ledger: int | None = None
    entry: int | None = None
    t: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "ledger": self.ledger, "entry": self.entry,
                "t": self.t}


@dataclass
class CheckResult:
    acknowledged: int = 0
    unknown: int = 0  # adds whose outcome nobody knows (info): may or may not be there
    ledgers: int = 0
    recoveries: int = 0
    log_commits: int = 0  # batches committed to named logs (the stream layer's acknowledgement)
    reads: dict[str, int] = field(default_factory=dict)  # per source
    violations: list[Violation] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for v in self.violations if v.kind == kind)


def check(events: Iterable[Event]) -> CheckResult:
    result = CheckResult()
    acked: dict[tuple[int, int], Event] = {}
    # (ledger, entry) -> content hash -> first event that saw it
    seen: dict[tuple[int, int], dict[str, Event]] = defaultdict(dict)
    closes: dict[int, list[Event]] = defaultdict(list)  # writers' closes, recoveries, final opens
    final_last: dict[int, int | None] = {}
    final_reads: dict[tuple[int, int], str] = {}
    tails: dict[tuple[str, int], list[Event]] = defaultdict(list)
    reads: dict[str, int] = defaultdict(int)
    ledgers: set[int] = set()
    for ev in sorted(events, key=lambda e: e["t"]):
        op, kind = ev.get("op"), ev.get("f")
        if op == "add":
            if kind == OK:
                acked[(ev["l"], ev["e"])] = ev
                if ev["e"] != ev.get("s", ev["e"]):
                    result.violations.append(Violation(
                        CORRUPT, f"{ev['p']} appended seq {ev['s']} and was told entry {ev['e']}",
                        ev["l"], ev["e"], ev["t"]))
            elif kind == "info":
                result.unknown += 1
        elif op == "create" and kind == OK:
            ledgers.add(ev["l"])
        elif op in ("close", "recover") and kind == OK:
            closes[ev["l"]].append(ev)
            if op == "recover":
                result.recoveries += 1
        elif op == "final-open":
            final_last[ev["l"]] = ev["last"] if kind == OK else None
            if kind == OK:
                closes[ev["l"]].append(ev)
            else:
                result.violations.append(Violation(
                    LOST, f"the final read could not open ledger {ev['l']}: {ev.get('error')}",
                    ev["l"], None, ev["t"]))
        elif op == "read" and kind == OK:
            src = ev.get("src", "?")
            reads[src] += 1
            key = (ev["l"], ev["e"])
            seen[key].setdefault(ev["h"], ev)
            if src == "final":
                final_reads[key] = ev["h"]
            if "bad" in ev:
                result.violations.append(Violation(
                    CORRUPT, f"{ev['p']} ({src}) read entry {ev['e']} of ledger {ev['l']}: {ev['bad']}",
                    ev["l"], ev["e"], ev["t"]))
            if src == "tail":
                tails[(ev["p"], ev["l"])].append(ev)
    result.acknowledged = len(acked)
    result.ledgers = len(ledgers | set(final_last))
    result.reads = dict(reads)
    _check_acked(acked, final_reads, final_last, result)
    _check_agreement(seen, result)
    _check_closes(closes, acked, result)
    _check_tails(tails, result)
    return result


def _check_acked(
    acked: dict[tuple[int, int], Event],
    final_reads: dict[tuple[int, int], str],
    final_last: dict[int, int | None],
    result: CheckResult,
) -> None:
    for (ledger, entry), ev in sorted(acked.items()):
        where = f"entry {entry} of ledger {ledger}, acknowledged to {ev['p']}"
        if ledger not in final_last:
            result.violations.append(Violation(LOST, f"{where}: the final read never saw its ledger",
                                               ledger, entry, ev["t"]))
            continue
        last = final_last[ledger]
        if last is None:
            continue  # already reported: the ledger could not be opened
        if entry > last:
            result.violations.append(Violation(
                TRUNCATED, f"{where}: the ledger was closed at {last}", ledger, entry, ev["t"]))
            continue
        final = final_reads.get((ledger, entry))
        if final is None:
            result.violations.append(Violation(LOST, f"{where}: the final read did not return it",
                                               ledger, entry, ev["t"]))
        elif ev["h"] != final:
            result.violations.append(Violation(
                DIVERGENT, f"{where}: acknowledged {ev['h']}, read back {final}", ledger, entry, ev["t"]))


def _check_agreement(seen: dict[tuple[int, int], dict[str, Event]], result: CheckResult) -> None:
    for (ledger, entry), versions in sorted(seen.items()):
        if len(versions) > 1:
            who = ", ".join(f"{r['p']} ({r.get('src')}) read {h}" for h, r in versions.items())
            result.violations.append(Violation(
                DIVERGENT, f"entry {entry} of ledger {ledger}: readers disagree: {who}", ledger, entry,
                min(r["t"] for r in versions.values())))


def _check_closes(
    closes: dict[int, list[Event]], acked: dict[tuple[int, int], Event], result: CheckResult
) -> None:
    last_acked: dict[int, Event] = {}
    for (ledger, entry), ev in acked.items():
        if ledger not in last_acked or entry > last_acked[ledger]["e"]:
            last_acked[ledger] = ev
    for ledger, events in sorted(closes.items()):
        points = {ev["last"] for ev in events}
        if len(points) > 1:
            who = ", ".join(f"{ev['p']} ({ev['op']}) at {ev['last']}" for ev in events)
            result.violations.append(Violation(
                CLOSE_MISMATCH, f"ledger {ledger} closed at different points: {who}", ledger, None,
                events[0]["t"]))
        high = last_acked.get(ledger)
        for ev in events:
            if ev["op"] == "recover" and high is not None and high["e"] > ev["last"]:
                result.violations.append(Violation(
                    AFTER_FENCE,
                    f"ledger {ledger}: {ev['p']} recovered it to {ev['last']}, yet {high['p']} was "
                    f"acknowledged entry {high['e']}", ledger, high["e"], high["t"]))


def _check_tails(tails: dict[tuple[str, int], list[Event]], result: CheckResult) -> None:
    for (process, ledger), events in sorted(tails.items()):
        for expected, ev in enumerate(events):
            if ev["e"] != expected:
                result.violations.append(Violation(
                    TAIL_GAP, f"{process} tailing ledger {ledger} expected entry {expected}, got {ev['e']}",
                    ledger, ev["e"], ev["t"]))
                break


def history_around(
    events: list[Event], violation: Violation, entries: int = 2, limit: int = 40
) -> list[Event]:
    """The minimal history that explains one violation: its ledger's lifecycle events and the
    records of the entries next to it, in time order."""
    if violation.ledger is None:
        return []
    lifecycle = ("create", "close", "recover", "final-open", "abandon", "tail")
    picked = [
        ev for ev in events
        if ev.get("l") == violation.ledger and (
            ev.get("op") in lifecycle
            or violation.entry is None
            or abs(int(ev.get("e", -10)) - violation.entry) <= entries
        )
    ]
    picked.sort(key=lambda e: e["t"])
    return picked[:limit]
