"""An in-memory :class:`~bookie.storage.api.LedgerStorage` with BookKeeper's durability, for the
deterministic simulation: no threads, no files, no fsync, no wall clock, no randomness of its own.

It models one disk (:class:`MemoryDisk`) that outlives the storage, as a real one outlives a
bookie process:

- a write is applied at once (records updated, entries readable) and appended to the disk's
  journal, encoded as the real journal encodes it (``journal_format``: length, CRC32C, type);
- the journal is durable only up to its last sync. Syncs are group commits: a write waits for the
  first sync that starts after it was appended, and writes arriving while one runs share the
  next. How long a sync takes is the injected ``sync`` hook's business (the simulation sleeps on
  its virtual clock, or raises OSError for a failing disk); without one a sync is immediate;
- a checkpoint moves everything written into the disk's ledger state (BookKeeper's flush: the
  write cache reaches the entry logs and indexes, whether or not its journal records were
  synced) and empties the journal;
- :meth:`MemoryLedgerStorage.crash` loses the journal past its last sync: by default all of it;
  given a ``random.Random``, a random prefix of it reached the disk and the record it cuts is
  torn (its CRC fails), as a real crash in the middle of a group write leaves it.

A new storage over the same disk recovers what the crash left: the checkpointed state, then the
journal's valid records (a fenced ledger stays fenced, a ledger keeps its master key). Opening a
new storage without a crash of the old one models a process kill: the old one stops answering
and, as a page cache would, the disk keeps every journal byte written, synced or not.

Use: ``Bookie(MemoryLedgerStorage(disk, sync=hook), wall_clock_ms=clock)``, then ``start()``;
a power cut is ``storage.crash(rng)`` and a restart a new storage and core over the same ``disk``.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, DiskInfo, JournalMark, LogMark
from bookie.errors import BookieError

from .api import LedgerRecord, LedgerStorage, LedgerUpdate, apply_update
from .compaction import Compacted
from .health import StorageHealth
from .journal_format import RecordType, entry_record_header, record_update, scan_records, update_record
from .log_garbage import LogFacts, LogUsage

SyncHook = Callable[[int], Awaitable[None]]  # the fsync of that many journal bytes
JOURNAL_NAME = Path("memory-journal")  # what journal marks and failures name


class MemoryDisk:
    """What survives a crash. Journal positions are absolute (they never go back), so a write
    can wait for "synced past my end" across checkpoints."""

    def __init__(self, capacity_bytes: int = 1 << 40) -> None:
        self.capacity_bytes = capacity_bytes
        self.records: dict[int, LedgerRecord] = {}  # checkpointed ledger index
        self.entries: dict[int, dict[int, bytes]] = {}  # checkpointed entries (the entry logs)
        self.journal = bytearray()  # written since the last checkpoint
        self.journal_start = 0  # absolute position of journal[0]
        self.synced = 0  # absolute position up to which the journal is durable
        self.generation = 0  # bumped by each storage that opens the disk

    @property
    def written(self) -> int:
        return self.journal_start + len(self.journal)

    def crash(self, rng: random.Random | None = None) -> None:
        """Lose the unsynced journal; with ``rng``, keep a random prefix of it (possibly ending
        in a torn record, which recovery's CRC check drops)."""
        keep = self.synced - self.journal_start
        unsynced = len(self.journal) - keep
        if rng is not None and unsynced > 0:
            keep += rng.randint(0, unsynced)
        del self.journal[keep:]


class MemoryLedgerStorage:
    """Event loop only. After :meth:`crash` (or :meth:`abandon`) every call raises EIO; build a
    new storage over the same disk to restart."""

    def __init__(
        self,
        disk: MemoryDisk | None = None,
        *,
        sync: SyncHook | None = None,
        checkpoint_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        """``checkpoint_bytes``: a journal longer than that is checkpointed after a write, which
        bounds the journal (and, as in DbLedgerStorage, makes unsynced entries durable)."""
        self.disk = disk if disk is not None else MemoryDisk()
        self.health = StorageHealth()
        self._sync_hook = sync
        self._checkpoint_bytes = checkpoint_bytes
        self._records: dict[int, LedgerRecord] = {}
        self._entries: dict[int, dict[int, bytes]] = {}
        self._last_entries: dict[int, int] = {}
        self._dirty: set[int] = set()  # ledgers changed since the last checkpoint
        self._stored_bytes = 0
        self._syncing: asyncio.Future[None] | None = None
        self._generation = -1
        self._stopped = "not started"  # why calls are refused; "" while running
        self.replayed_records = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._load_checkpointed()
        for rtype, payload, _ in scan_records(bytes(self.disk.journal), 0):
            self._replay(rtype, payload)
        self._stopped = ""
        # as DbLedgerStorage does: checkpoint what replay restored (a torn tail goes with it)
        self._checkpoint()

    def _load_checkpointed(self) -> None:
        """Take the disk over (a storage opened earlier on it stops answering) and load its
        checkpointed state."""
        disk = self.disk
        disk.generation += 1
        self._generation = disk.generation
        self._records = dict(disk.records)
        self._entries = {ledger_id: dict(entries) for ledger_id, entries in disk.entries.items()}
        self._last_entries = {ledger_id: max(e) for ledger_id, e in self._entries.items() if e}
        self._stored_bytes = sum(len(b) for entries in self._entries.values() for b in entries.values())

    def _replay(self, rtype: RecordType, payload: memoryview) -> None:
        """Apply one journal record found at start-up."""
        if rtype is RecordType.ENTRY:
            ledger_id, entry_id = HEADER.unpack_from(payload)[:2]
            self._put(ledger_id, entry_id, bytes(payload))
        else:
            self._update(record_update(rtype, payload))
        self.replayed_records += 1

    async def close(self) -> None:
        if not self._stopped:
            self._checkpoint()
            self._stop("closed")

    def abandon(self) -> None:
        self.crash()

    def crash(self, rng: random.Random | None = None) -> None:
        """Stop as a power cut would: the disk keeps what was synced (see :meth:`MemoryDisk.crash`)
        and writes still waiting for a sync fail."""
        if self._generation == self.disk.generation and self._stopped != "crashed":
            self.disk.crash(rng)
        self._stop("crashed")

    def _stop(self, why: str) -> None:
        self._stopped = why
        if self._syncing is not None and not self._syncing.done():
            self._syncing.set_result(None)  # its waiters wake and see the storage stopped

    def _check_running(self) -> None:
        if self._stopped or self._generation != self.disk.generation:
            raise BookieError(bookie_pb2.EIO, f"storage is {self._stopped or 'replaced'}")
        if self.health.journal_failure is not None:
            raise BookieError(bookie_pb2.EIO, f"journal failed: {self.health.journal_failure}")

    # ---- writes ------------------------------------------------------------------------------

    async def make_room(self, nbytes: int) -> None:
        self._check_running()

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        self._check_running()
        journal = self.disk.journal
        journal += b"".join(self._apply(updates, entries)[0])
        end = self.disk.written
        if len(journal) > self._checkpoint_bytes:
            self._checkpoint()
        return self._synced_past(end)

    async def force(self, ledger_id: int) -> None:
        self._check_running()
        await self._synced_past(self.disk.written)

    async def checkpoint(self) -> None:
        self._check_running()
        self._checkpoint()

    def _apply(self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp]) -> tuple[list[bytes], int]:
        """Apply a write to the ledgers: its journal records' parts, and how many records."""
        parts = [update_record(update) for update in updates if self._update(update)]
        records = len(parts) + len(entries)
        for ledger_id, entry_id, _, body, _, _ in entries:
            self._put(ledger_id, entry_id, body)
            parts += (entry_record_header(body), body)
        return parts, records

    def _update(self, update: LedgerUpdate) -> bool:
        record = apply_update(self._records.get(update.ledger_id), update)
        if record is None:
            return False
        self._records[update.ledger_id] = record
        self._dirty.add(update.ledger_id)
        return True

    def _put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        entries = self._entries.setdefault(ledger_id, {})
        old = entries.get(entry_id)
        self._stored_bytes += len(body) - (len(old) if old is not None else 0)
        entries[entry_id] = body
        if entry_id > self._last_entries.get(ledger_id, -1):
            self._last_entries[ledger_id] = entry_id
        self._dirty.add(ledger_id)

    def _checkpoint(self) -> None:
        """Everything written becomes durable in the disk's ledger state; the journal empties."""
        disk = self.disk
        for ledger_id in sorted(self._dirty):
            record = self._records.get(ledger_id)
            if record is not None:
                disk.records[ledger_id] = record
            if ledger_id in self._entries:
                disk.entries[ledger_id] = dict(self._entries[ledger_id])
        self._dirty.clear()
        disk.journal_start = disk.synced = disk.written
        disk.journal.clear()

    async def _synced_past(self, end: int) -> None:
        """Group commit: wait for a sync that started after ``end`` was written, starting one
        (through the sync hook) when none is running."""
        disk = self.disk
        while disk.synced < end:
            self._check_running()
            if self._syncing is not None:
                await asyncio.shield(self._syncing)
                continue
            syncing = self._syncing = asyncio.get_running_loop().create_future()
            target = disk.written
            try:
                if self._sync_hook is not None:
                    await self._sync_hook(target - disk.synced)
            except Exception as exc:  # the disk failed: so does this journal, for good
                self.health.journal_failed(JOURNAL_NAME, exc)
                raise BookieError(bookie_pb2.EIO, f"journal sync failed: {exc}") from exc
            finally:
                self._syncing = None
                if not syncing.done():
                    syncing.set_result(None)
            self._check_running()  # a crash during the sync: it never completed
            disk.synced = max(disk.synced, target)

    # ---- reads -------------------------------------------------------------------------------

    def ledger_record(self, ledger_id: int) -> LedgerRecord | None:
        return self._records.get(ledger_id)

    def last_entry(self, ledger_id: int) -> int:
        return self._last_entries.get(ledger_id, -1)

    def last_entry_body(self, ledger_id: int) -> bytes | None:
        entries = self._entries.get(ledger_id)
        last = self._last_entries.get(ledger_id)
        return None if entries is None or last is None else entries.get(last)

    async def read(self, ledger_id: int, entry_id: int) -> bytes | None:
        self._check_readable()
        entries = self._entries.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    async def read_range(
        self, ledger_id: int, first: int, max_count: int, max_bytes: int, stride: int = 1
    ) -> list[bytes]:
        self._check_readable()
        entries = self._entries.get(ledger_id, {})
        out: list[bytes] = []
        size = 0
        entry_id = first
        while len(out) < max_count:
            body = entries.get(entry_id)
            if body is None or (out and size + len(body) > max_bytes):
                break
            out.append(body)
            size += len(body)
            entry_id += stride
        return out

    async def entry_ids(self, ledger_id: int) -> list[int]:
        self._check_readable()
        return sorted(self._entries.get(ledger_id, ()))

    def _check_readable(self) -> None:
        if self._stopped and self._stopped != "closed":
            raise BookieError(bookie_pb2.EIO, f"storage is {self._stopped}")

    # ---- garbage collection and admin --------------------------------------------------------

    async def local_ledger_ids(self) -> set[int]:
        return set(self._records) | set(self._entries)

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """Durable at once. The journal is checkpointed first, so no journal record of the
        ledgers is left to bring them back at the next recovery."""
        self._check_running()
        self._checkpoint()
        disk = self.disk
        for ledger_id in sorted(ledger_ids):
            self._records.pop(ledger_id, None)
            self._last_entries.pop(ledger_id, None)
            entries = self._entries.pop(ledger_id, None)
            if entries is not None:
                self._stored_bytes -= sum(map(len, entries.values()))
            disk.records.pop(ledger_id, None)
            disk.entries.pop(ledger_id, None)

    async def reclaim_entry_logs(self) -> LogUsage:
        return LogUsage()  # no entry logs: deleted ledgers took their space with them

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted:
        return Compacted()

    async def entry_log_facts(self) -> list[LogFacts]:
        return []

    def disk_usage(self) -> DiskInfo:
        used = self._stored_bytes + len(self.disk.journal)
        return DiskInfo(self.disk.capacity_bytes, max(0, self.disk.capacity_bytes - used))

    def journal_marks(self) -> list[JournalMark]:
        return [JournalMark(JOURNAL_NAME, LogMark(0, self.disk.synced))]


if TYPE_CHECKING:  # mypy proves the storage satisfies the protocol the core takes
    _conforms: LedgerStorage = MemoryLedgerStorage()
