"""The contract between the bookie core (``bookie.bookie.Bookie``) and its storage.

The core owns BookKeeper's rules (which adds to take, master keys, fencing, LAC); a storage owns
durability: where entries and ledger records go, in which order, what a crash keeps. Two storages
satisfy :class:`LedgerStorage`: ``DbLedgerStorage`` (journal, write cache, entry logs, RocksDB)
for the daemon, and ``MemoryLedgerStorage`` (a modelled disk, no threads, no files) for the
deterministic simulation.

A ledger's durable state is its :class:`LedgerRecord` (master key, fenced, explicit LAC body) and
its entries. Records change only through :class:`LedgerUpdate`, the same changes a journal
records and replays, so a storage applies a live write and a replayed one with one rule
(:func:`apply_update`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import NamedTuple, Protocol

from bookie.api import AddOp, DiskInfo, JournalMark

from .compaction import Compacted
from .health import StorageHealth
from .log_garbage import LogFacts, LogUsage


@dataclass
class LedgerRecord:
    """What a bookie keeps of a ledger besides its entries (BookKeeper's ``LedgerData``). An
    empty master key means the index was rebuilt without one (the first key presented wins)."""

    master_key: bytes
    fenced: bool = False
    explicit_lac: bytes | None = None  # the last WriteLac body


class UpdateKind(IntEnum):
    """What a :class:`LedgerUpdate` changes."""

    MASTER_KEY = 2  # value: the key; creates the record, or keys one rebuilt without a key
    FENCE = 3  # value: unused
    EXPLICIT_LAC = 4  # value: the LAC body (its 16-byte header names ledger and LAC)


class LedgerUpdate(NamedTuple):
    ledger_id: int
    kind: UpdateKind
    value: bytes = b""


def apply_update(record: LedgerRecord | None, update: LedgerUpdate) -> LedgerRecord | None:
    """The record after ``update`` (a new object: a record handed out is never changed under
    its holder); None when the update needs a record and the ledger has none (a fence or LAC
    record whose key record was lost)."""
    if update.kind is UpdateKind.MASTER_KEY:
        if record is None:
            return LedgerRecord(update.value)
        return record if record.master_key else replace(record, master_key=update.value)
    if record is None:
        return None
    if update.kind is UpdateKind.FENCE:
        return replace(record, fenced=True)
    return replace(record, explicit_lac=update.value)


class LedgerStorage(Protocol):
    """What the bookie core needs of its storage. Everything runs on the bookie's event loop.

    Writes are two-phase: :meth:`write` applies at once (records updated, entries readable) and
    returns an awaitable that completes once all of it is durable. The core validates a batch,
    writes it and publishes its LACs with no suspension in between, so no request sees a state
    between validation and write."""

    @property
    def health(self) -> StorageHealth:
        """Write failures (the state manager turns the bookie read-only while they last)."""
        ...

    async def start(self) -> None:
        """Open, recovering what the last run made durable."""
        ...

    async def close(self) -> None:
        """Make everything durable (flush and checkpoint): a clean restart recovers at once."""
        ...

    def abandon(self) -> None:
        """Tests and simulation: stop as a crash would; only what was durable survives."""
        ...

    # ---- writes ------------------------------------------------------------------------------

    async def make_room(self, nbytes: int) -> None:
        """Backpressure before a batch of about ``nbytes`` of entries: wait (bounded) for room,
        or raise ETOOMANYREQUESTS / EIO. Called before the batch is validated."""
        ...

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        """Apply ``updates`` then store ``entries`` (already validated) now; the awaitable
        completes once both are durable, or raises (BookieError, or anything for a storage
        fault). Journal order is updates first, so no entry is durable without its ledger's key.
        ``keep_loop_free``: work waits on the event loop (parked long polls the write's LAC may
        wake), so the sync must not block the loop even when it would be cheapest there."""
        ...

    async def force(self, ledger_id: int) -> None:
        """A barrier: returns once every write of the ledger made before it is durable."""
        ...

    async def checkpoint(self) -> None:
        """Flush what is cached to its final place now (BookKeeper's checkpoint)."""
        ...

    # ---- reads -------------------------------------------------------------------------------

    def ledger_record(self, ledger_id: int) -> LedgerRecord | None:
        """The ledger's record, or None if the bookie has none."""
        ...

    def last_entry(self, ledger_id: int) -> int:
        """The highest entry id stored for the ledger; -1 if none."""
        ...

    def last_entry_body(self, ledger_id: int) -> bytes | None:
        """The body of that entry, read without yielding: the core reads it once per ledger
        after a restart, for the LAC it carries."""
        ...

    async def read(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's body; None if not stored."""
        ...

    async def read_range(
        self, ledger_id: int, first: int, max_count: int, max_bytes: int, stride: int = 1
    ) -> list[bytes]:
        """Bodies of ``first``, ``first + stride``, ... up to the first one not stored, at most
        ``max_count`` of them and, past the first, no more than ``max_bytes`` in all. Empty if
        ``first`` is not stored. Range reads (catch-up readers) pay per call, not per entry."""
        ...

    async def entry_ids(self, ledger_id: int) -> list[int]:
        """Every stored entry id of the ledger, ascending."""
        ...

    # ---- garbage collection and admin --------------------------------------------------------

    async def local_ledger_ids(self) -> set[int]: ...

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """Forget the ledgers durably (their metadata is gone); returns when done, even if it
        raises part-way."""
        ...

    async def reclaim_entry_logs(self) -> LogUsage: ...

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted: ...

    async def entry_log_facts(self) -> list[LogFacts]:
        """Every entry log, for ``gcexplain`` (none for a storage without entry logs)."""
        ...

    def disk_usage(self) -> DiskInfo:
        """Total and free bytes of the ledger disks."""
        ...

    def journal_marks(self) -> list[JournalMark]:
        """The persisted LastLogMark of each journal, in configuration order."""
        ...
