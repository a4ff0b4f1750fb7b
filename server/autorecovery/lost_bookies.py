"""When a lost bookie's data is due to be re-replicated: the lostBookieRecoveryDelay and the
operator's overrides, kept apart from any ZooKeeper or copying so the rules can be tested alone.

A bookie first seen gone waits ``lostBookieRecoveryDelay``; once due it stays due (its copies are
retried) until it is back or no ledger names it any more. As in BookKeeper's auditor:

- "audit now" (the delay written with its own value, or 0) makes every waiting bookie due;
- a new delay restarts the wait of the bookies still waiting, from the change; due ones stay due;
- when more than one bookie is waiting, a further loss could leave entries with no copy at all:
  they are all due at once. Bookies already due do not count: they are being taken care of.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass


@dataclass(frozen=True)
class Observation:
    gone: tuple[str, ...]  # seen gone for the first time
    back: tuple[str, ...]  # registered again, or no longer named by any ledger
    due: frozenset[str]  # re-replicate these now
    several_lost: int  # > 0: this many waiting bookies were made due together
    next_due_in_s: float | None  # until the next waiting bookie is due (None: none waits)


class LostBookieClock:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._gone_since: dict[str, float] = {}
        self._waiting_since: dict[str, float] = {}
        self._due: set[str] = set()

    def gone_for(self, bookie_id: str, now: float) -> float:
        """How long ``bookie_id`` has been seen gone (an open ledger's grace counts from then)."""
        return now - self._gone_since.get(bookie_id, now)

    def observe(
        self, missing: Set[str], now: float, delay_s: float, *, audit_now: bool = False,
        delay_changed: bool = False,
    ) -> Observation:
        gone = tuple(sorted(missing - self._gone_since.keys()))
        back = tuple(sorted(self._gone_since.keys() - missing))
        self._gone_since = {b: self._gone_since.get(b, now) for b in missing}
        self._due &= missing
        waiting = {b: self._waiting_since.get(b, now) for b in missing - self._due}
        if delay_changed:
            waiting = dict.fromkeys(waiting, now)
        several = 0
        if audit_now:
            self._due |= waiting.keys()
        elif len(waiting) > 1:
            several = len(waiting)
            self._due |= waiting.keys()
        else:
            self._due |= {b for b, since in waiting.items() if now - since >= delay_s}
        self._waiting_since = {b: since for b, since in waiting.items() if b not in self._due}
        next_due = [since + delay_s - now for since in self._waiting_since.values()]
        return Observation(gone, back, frozenset(self._due), several, min(next_due) if next_due else None)
