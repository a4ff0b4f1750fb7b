"""The run's trace and history.

Every simulated event (message delivery, timer-driven fault, disk crash, operation) feeds a SHA-256
trace hash: two runs of one seed must end with the same hash (the determinism check). Readable
events are kept too, so a failure can show the ones that matter.

The history is Jepsen's: each operation is an ``invoke`` followed by ``ok``, ``fail`` (it surely did
not happen) or ``info`` (unknown outcome), with the virtual time in microseconds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class HistoryOp:
    index: int
    time_us: int
    process: str
    kind: str  # invoke | ok | fail | info
    f: str  # add | close | recover | read | lac | tail | delete | ...
    ledger: int = -1
    entry: int = -1
    value: Any = None

    def __str__(self) -> str:
        where = f" L{self.ledger}" if self.ledger >= 0 else ""
        where += f" e{self.entry}" if self.entry >= 0 else ""
        value = f" {self.value!r}" if self.value is not None else ""
        return f"{self.time_us / 1e6:10.6f}s {self.process:<10} {self.kind:<6} {self.f}{where}{value}"


@dataclass
class Trace:
    clock: Callable[[], int]  # virtual microseconds
    events: list[str] = field(default_factory=list)
    history: list[HistoryOp] = field(default_factory=list)
    count: int = 0  # simulated events, readable or not
    keep_events: bool = True
    _hash: Any = field(default_factory=hashlib.sha256)

    def tick(self, *parts: object) -> None:
        """A low-level event (a message delivery): hashed and counted, not kept."""
        self.count += 1
        self._hash.update(repr((self.clock(), parts)).encode())

    def event(self, text: str) -> None:
        """A readable event (a fault, a restart): hashed, counted and kept."""
        self.tick(text)
        if self.keep_events:
            self.events.append(f"{self.clock() / 1e6:10.6f}s {text}")

    def op(
        self, process: str, kind: str, f: str, ledger: int = -1, entry: int = -1, value: Any = None
    ) -> HistoryOp:
        record = HistoryOp(len(self.history), self.clock(), process, kind, f, ledger, entry, value)
        self.history.append(record)
        self.tick(str(record))
        if self.keep_events:
            self.events.append(str(record))
        return record

    @property
    def digest(self) -> str:
        return str(self._hash.hexdigest())
