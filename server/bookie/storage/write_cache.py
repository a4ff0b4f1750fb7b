"""The double-buffered write cache (DbLedgerStorage's ``writeCache`` + ``writeCacheBeingFlushed``).

Adds go into the active half; a full half (or the flush timer) swaps the halves and the swapped
half is flushed off the loop while reads still see it. The halves are bounded by bytes: when the
active half is full and the other is still being flushed, adds wait (see ``DbLedgerStorage``).
Only the event loop mutates the halves; the flush thread only reads a swapped half.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WriteCacheHalf:
    entries: dict[tuple[int, int], bytes] = field(default_factory=dict)
    last_entry: dict[int, int] = field(default_factory=dict)  # ledger -> highest entry id here
    size: int = 0

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        key = (ledger_id, entry_id)
        old = self.entries.get(key)
        if old is not None:
            self.size -= len(old)
        self.entries[key] = body
        self.size += len(body)
        if entry_id > self.last_entry.get(ledger_id, -1):
            self.last_entry[ledger_id] = entry_id

    def sorted_items(self) -> list[tuple[tuple[int, int], bytes]]:
        return sorted(self.entries.items())


class WriteCache:
    def __init__(self, max_bytes: int) -> None:
        self.half_capacity = max(1, max_bytes // 2)
        self.active = WriteCacheHalf()
        self.flushing: WriteCacheHalf | None = None

    @property
    def size(self) -> int:
        return self.active.size + (self.flushing.size if self.flushing is not None else 0)

    def has_room(self, nbytes: int) -> bool:
        """An empty half always takes one batch, so an entry larger than a half still goes in."""
        return self.active.size == 0 or self.active.size + nbytes <= self.half_capacity

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self.active.put(ledger_id, entry_id, body)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        body = self.active.entries.get(key)
        if body is None and self.flushing is not None:
            body = self.flushing.entries.get(key)
        return body

    def last_entry(self, ledger_id: int) -> int:
        last = self.active.last_entry.get(ledger_id, -1)
        if self.flushing is not None:
            last = max(last, self.flushing.last_entry.get(ledger_id, -1))
        return last

    def entry_ids(self, ledger_id: int) -> list[int]:
        halves = [self.active] if self.flushing is None else [self.active, self.flushing]
        ids: set[int] = set()
        for half in halves:
            if ledger_id in half.last_entry:
                ids.update(e for (led, e) in half.entries if led == ledger_id)
        return sorted(ids)

    def swap(self) -> WriteCacheHalf:
        """Make the active half the one being flushed; the caller flushes it then calls done."""
        assert self.flushing is None, "a flush is already running"
        self.flushing, self.active = self.active, WriteCacheHalf()
        return self.flushing

    def flush_done(self) -> None:
        self.flushing = None
