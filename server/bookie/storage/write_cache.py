"""The double-buffered write cache (DbLedgerStorage's ``writeCache`` + ``writeCacheBeingFlushed``).

Adds go into the active half; a full half (or the flush timer) swaps the halves and the swapped
half is flushed off the loop while reads still see it. The halves are bounded by bytes: when the
active half is full and the other is still being flushed, adds wait (see ``DbLedgerStorage``).
Only the event loop mutates the halves; the flush thread only reads a swapped half.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from bookie.api import AddOp

_LEDGER_ID = itemgetter(0)  # AddOp's fields, read in C
_ENTRY_ID = itemgetter(1)
_BODY = itemgetter(3)


@dataclass
class WriteCacheHalf:
    """Entries by ledger, then by entry id. Keyed by plain ints rather than (ledger, entry)
    tuples: a dict of ints and bytes is not tracked by the garbage collector, whereas a tuple
    key per entry put tens of thousands of objects in front of every full collection, and those
    ran every time a half filled (docs/performance.md)."""

    ledgers: dict[int, dict[int, bytes]] = field(default_factory=dict)
    last_entries: dict[int, int] = field(default_factory=dict)  # ledger -> highest entry id here
    size: int = 0
    # Ledger -> entry id -> the CRC32C of the entry's body here, when the add path computed it
    # already (journal_format.entry_records): the flush writes it into the entry log rather than
    # computing it again. An entry without one (a replayed or absorbed entry) gets its CRC then.
    crcs: dict[int, dict[int, int]] = field(default_factory=dict)

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = {}
        old = entries.get(entry_id)
        if old is not None:
            self.size -= len(old)
            crcs = self.crcs.get(ledger_id)
            if crcs is not None:
                crcs.pop(entry_id, None)  # the CRC of the body this one replaces
        entries[entry_id] = body
        self.size += len(body)
        if entry_id > self.last_entries.get(ledger_id, -1):
            self.last_entries[ledger_id] = entry_id

    def absorb(self, newer: WriteCacheHalf) -> WriteCacheHalf:
        """This half with ``newer``'s entries put over it (a newer body wins), returned."""
        for ledger_id, entries in newer.ledgers.items():
            for entry_id, body in entries.items():
                self.put(ledger_id, entry_id, body)
        return self

    def put_all(self, adds: Sequence[AddOp], crcs: Sequence[int] | None = None) -> None:
        """:meth:`put` for each add of a batch, in one call: the add path's per-entry work is
        what its throughput is made of, and a method call per entry was a fair part of it.
        ``crcs``: each add's body CRC32C, in the same order, kept for the flush."""
        if self._put_new_entries_of_one_ledger(adds, crcs):
            return
        self._put_each(adds)
        if crcs is not None:
            for (ledger_id, entry_id, *_), crc in zip(adds, crcs, strict=True):
                found = self.crcs.get(ledger_id)
                if found is None:
                    found = self.crcs[ledger_id] = {}
                found[entry_id] = crc
        elif self.crcs:  # bodies without a CRC: none kept for a body they replace
            for ledger_id, entry_id, *_ in adds:
                found = self.crcs.get(ledger_id)
                if found is not None:
                    found.pop(entry_id, None)

    def _put_new_entries_of_one_ledger(self, adds: Sequence[AddOp], crcs: Sequence[int] | None) -> bool:
        """:meth:`put_all` of the usual batch, entries of one ledger that are not here yet, in a
        few C-level passes; False, having changed nothing, for any other batch."""
        count = len(adds)
        if not count:
            return True
        ledger_id = adds[0][0]
        if list(map(_LEDGER_ID, adds)).count(ledger_id) != count:
            return False
        entry_ids = list(map(_ENTRY_ID, adds))
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = {}
        elif not entries.keys().isdisjoint(entry_ids):
            return False
        before = len(entries)
        entries.update(zip(entry_ids, map(_BODY, adds), strict=True))
        if len(entries) - before == count:
            self.size += sum(map(len, map(_BODY, adds)))
        else:  # an entry id twice in the batch: each id's last body is the one kept
            self.size += sum(len(entries[entry_id]) for entry_id in set(entry_ids))
        if crcs is not None:  # (ids new to this half: no CRC of theirs is here to drop)
            known = self.crcs.get(ledger_id)
            if known is None:
                known = self.crcs[ledger_id] = {}
            known.update(zip(entry_ids, crcs, strict=True))
        last = max(entry_ids)
        if last > self.last_entries.get(ledger_id, -1):
            self.last_entries[ledger_id] = last
        return True

    def _put_each(self, adds: Sequence[AddOp]) -> None:
        ledgers = self.ledgers
        last_entries = self.last_entries
        size = self.size
        current_id = -1
        current: dict[int, bytes] = {}
        for ledger_id, entry_id, _, body, _, _ in adds:
            if ledger_id != current_id:
                current_id = ledger_id
                found = ledgers.get(ledger_id)
                if found is None:
                    found = ledgers[ledger_id] = {}
                current = found
            old = current.get(entry_id)
            if old is not None:
                size -= len(old)
            current[entry_id] = body
            size += len(body)
            if entry_id > last_entries.get(ledger_id, -1):
                last_entries[ledger_id] = entry_id
        self.size = size

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def last_entry(self, ledger_id: int) -> int:
        return self.last_entries.get(ledger_id, -1)

    def drop_ledger(self, ledger_id: int) -> None:
        self.crcs.pop(ledger_id, None)
        entries = self.ledgers.pop(ledger_id, None)
        if entries is not None:
            self.size -= sum(len(body) for body in entries.values())
            self.last_entries.pop(ledger_id, None)

    def sorted_ledgers(self) -> list[tuple[int, dict[int, bytes]]]:
        """(ledger id, its entries) in ledger order: what a flush writes."""
        return sorted(self.ledgers.items())


class WriteCache:
    def __init__(self, max_bytes: int) -> None:
        self.half_capacity = max(1, max_bytes // 2)
        self.active = WriteCacheHalf()
        self.flushing: WriteCacheHalf | None = None

    @property
    def size(self) -> int:
        """Bytes in both halves; also read by metrics scrapes on another thread, hence the one
        read of ``flushing``."""
        flushing = self.flushing
        return self.active.size + (flushing.size if flushing is not None else 0)

    def has_room(self, nbytes: int) -> bool:
        """An empty half always takes one batch, so an entry larger than a half still goes in."""
        return self.active.size == 0 or self.active.size + nbytes <= self.half_capacity

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self.active.put(ledger_id, entry_id, body)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        body = self.active.get(ledger_id, entry_id)
        if body is None and self.flushing is not None:
            body = self.flushing.get(ledger_id, entry_id)
        return body

    def last_entry(self, ledger_id: int) -> int:
        last = self.active.last_entry(ledger_id)
        if self.flushing is not None:
            last = max(last, self.flushing.last_entry(ledger_id))
        return last

    def entry_ids(self, ledger_id: int) -> list[int]:
        ids: set[int] = set(self.active.ledgers.get(ledger_id, ()))
        if self.flushing is not None:
            ids.update(self.flushing.ledgers.get(ledger_id, ()))
        return sorted(ids)

    def drop_ledger(self, ledger_id: int) -> None:
        """A deleted ledger's entries: gone from the active half; a half being flushed keeps
        them for the flush thread, which skips deleted ledgers."""
        self.active.drop_ledger(ledger_id)

    def swap(self) -> WriteCacheHalf:
        """Make the active half the one being flushed; the caller flushes it then calls done."""
        assert self.flushing is None, "a flush is already running"
        self.flushing, self.active = self.active, WriteCacheHalf()
        return self.flushing

    def flush_done(self) -> None:
        self.flushing = None

    def active_share(self) -> float:
        """How full the active half is, 0..1 (read by the flush's pacer, on its thread)."""
        return self.active.size / self.half_capacity
