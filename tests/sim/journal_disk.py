"""The real journal (``bookie.storage.journal.Journal``) on a simulated disk.

The simulation's storage is ``MemoryLedgerStorage``, whose journal is a model. A swarm with
``real_journal`` runs :class:`JournaledStorage` instead: the same ledger state, journaled through
the production ``Journal``, so its loop-side code runs under the simulation's interleavings,
crashes and slow disks: the inline sync of a lone small batch, the group commit's accounting, the
admission line under backpressure, force barriers, rollovers and replay.

What stands in for what:

- :class:`SimJournalFiles` for the journal's directory (``JournalFiles``). Its files outlive a
  bookie crash; a sync makes a file durable up to where it was written, and a crash keeps a
  random prefix of the rest (possibly a torn record, which replay drops).
- A task on the simulation's loop for the writer thread (:class:`SimJournal`): it takes every
  queued batch as one group, writes it, and holds the files while the sync's time passes; the
  loop side completes the group one loop turn later, as ``call_soon_threadsafe`` would.
- The loop's virtual clock for ``time.perf_counter``. A sync made on the loop itself (the inline
  path) blocks the loop: virtual time jumps by the sync's duration, and timers fire late.

Two of the journal's own rules are checked, and a breach is recorded
(``SimJournalFiles.breaches``) for the ``journal_rules_kept`` checker to report:

- the loop writes or syncs a file only while the writer holds nothing. On a real disk a loop-side
  write while the writer is between its write and the end of its sync would move the file's
  offset at once with the writer's, and an acknowledged record could be overwritten;
- batches reach the file in the order they were submitted. A ledger's master-key record must come
  before its entries, or replay after a crash between the two finds entries without their key.
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, DiskInfo, JournalMark, LogMark
from bookie.errors import BookieError
from bookie.storage.api import LedgerUpdate
from bookie.storage.health import StorageHealth
from bookie.storage.journal import Journal, JournalBatch, JournalSettings
from bookie.storage.journal_format import (
    FILE_HEADER_SIZE,
    RecordType,
    ScanEnd,
    file_header,
    scan_end,
    scan_records,
)
from bookie.storage.memory import JOURNAL_NAME, MemoryDisk, MemoryLedgerStorage
from bookie.storage.stats import StorageStats

from .loop import SimLoop

_SETTINGS = JournalSettings(
    directory=Path("sim-journal"),
    pre_alloc_bytes=0,
    max_file_bytes=4096,  # small: journals roll over to a new file in most runs
    max_backups=1,
    queue_size=8,  # small: submits wait in line for room (the admission line) when a disk is slow
    group_wait_s=0.0,
    buffered_writes_threshold=512 * 1024,
    flush_when_queue_empty=False,
    sync_data=True,
)


class SimJournalFile:
    """One journal file: bytes written, and how many of them a sync made durable."""

    def __init__(self, files: SimJournalFiles, journal_id: int) -> None:
        self._files = files
        self.journal_id = journal_id
        self.data = bytearray(file_header(journal_id))
        self.offset = FILE_HEADER_SIZE
        self.synced = FILE_HEADER_SIZE  # a new file's header is synced before it is used
        self.closed = False

    def append(self, data: bytes) -> int:
        self._check_open()
        self._files.check_exclusive(f"append to journal {self.journal_id:x}")
        self._files.disk_error()
        self.data += data
        self.offset = len(self.data)
        return self.offset

    def sync(self) -> None:
        self._check_open()
        self._files.sync(self)

    def close(self) -> None:
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:  # the real file's descriptor is closed: EBADF
            raise OSError(errno.EBADF, f"journal {self.journal_id:x} is closed")


class SimRecords:
    """``FileRecords`` over a simulated file's bytes."""

    def __init__(self, data: bytes, start: int) -> None:
        self._data = data
        self.start = start
        self.end = start
        self.why = ScanEnd.CLEAN

    def header(self) -> bytes:
        return self._data[:FILE_HEADER_SIZE]

    def __iter__(self) -> Iterator[tuple[RecordType, memoryview, int]]:
        end = self.start
        for rtype, payload, end in scan_records(self._data, self.start):
            yield rtype, payload, end
        self.end, self.why = end, scan_end(self._data, end)


class SimJournalFiles:
    """A bookie's journal directory on its simulated disk (it outlives the bookie's crashes).

    ``sync_delay_s`` draws how long one sync takes. The writer task holds the files from its
    write to the end of its sync (``holder``); a sync made by anyone else is the loop's own
    (the inline path), and blocks the loop for its duration."""

    def __init__(
        self,
        name: str,
        loop: SimLoop,
        sync_delay_s: Callable[[], float],
        loop_sync_delay_s: Callable[[], float],
        breaches: list[str],
        disk_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self._loop = loop
        self._sync_delay_s = sync_delay_s
        self._loop_sync_delay_s = loop_sync_delay_s
        self.files: dict[int, SimJournalFile] = {}
        self.checkpoint = LogMark(0, 0)  # where replay starts: the last checkpoint's mark
        self.holder: asyncio.Task[object] | None = None
        self.pending_sync: tuple[SimJournalFile, int] | None = None
        self.breaches = breaches  # the world's: every disk reports there
        self.disk_error = disk_error  # raises the nemesis's disk error when armed
        # for the run's closing summary
        self.created = self.writer_syncs = self.inline_syncs = self.barriers = self.waited = 0

    # -- JournalFiles --------------------------------------------------------------------------

    def ids(self) -> list[int]:
        return sorted(self.files)

    def create(self, journal_id: int) -> SimJournalFile:
        if journal_id in self.files:  # JournalFile opens with O_EXCL
            raise FileExistsError(errno.EEXIST, f"journal {journal_id:x} exists")
        file = self.files[journal_id] = SimJournalFile(self, journal_id)
        self.created += 1
        return file

    def records(self, journal_id: int, start: int) -> SimRecords:
        return SimRecords(bytes(self.files[journal_id].data), start)

    def remove(self, journal_id: int) -> None:
        self.files.pop(journal_id, None)

    # -- the disk ------------------------------------------------------------------------------

    def check_exclusive(self, what: str) -> None:
        """The journal's rule: nobody but the writer touches the files while it holds them."""
        holder = self.holder
        if holder is not None and asyncio.current_task() is not holder:
            self.breaches.append(
                f"{self.name}: {what} at {self._loop.time():.6f} s while the writer was writing or syncing"
            )

    def sync(self, file: SimJournalFile) -> None:
        if self.holder is not None and asyncio.current_task() is self.holder:
            self.pending_sync = (file, file.offset)  # durable once the writer's sync time passed
            return
        self.check_exclusive(f"sync of journal {file.journal_id:x}")
        self.inline_syncs += 1
        self._loop.block(self._loop_sync_delay_s())
        file.synced = file.offset

    async def finish_sync(self) -> None:
        """The writer's sync: its time passes, then what it covered is durable."""
        await asyncio.sleep(self._sync_delay_s())
        self.writer_syncs += 1
        if self.pending_sync is not None:
            file, upto = self.pending_sync
            self.pending_sync = None
            file.synced = max(file.synced, upto)

    def crash(self, rng: random.Random | None) -> tuple[int, int]:
        """Power loss: every file keeps what was synced and, with ``rng``, a random prefix of the
        rest (which may end in a torn record). Returns (unsynced bytes, of them kept)."""
        self.holder = None
        self.pending_sync = None
        unsynced = kept = 0
        for file in self.files.values():
            lost = len(file.data) - file.synced
            keep = rng.randint(0, lost) if rng is not None and lost > 0 else 0
            unsynced += lost
            kept += keep
            del file.data[file.synced + keep :]
            file.offset = len(file.data)
        return unsynced, kept

    def describe(self) -> str:
        return (
            f"{self.writer_syncs} syncs by the writer, {self.inline_syncs} on the loop, "
            f"{self.created} files created, {self.barriers} barriers, "
            f"{self.waited} submits waited for room"
        )

    @property
    def nbytes(self) -> int:
        return sum(len(file.data) for file in self.files.values())


class SimJournal(Journal):
    """The production ``Journal`` with a task on the simulation's loop as its writer thread."""

    def __init__(self, files: SimJournalFiles, loop: SimLoop, health: StorageHealth) -> None:
        super().__init__(_SETTINGS, StorageStats(CollectorRegistry()), health, files=files, clock=loop.time)
        self._sim_files = files
        self._sim_loop = loop
        self._inbox: deque[JournalBatch | None] = deque()
        self._arrived = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._writing: list[JournalBatch] = []
        # submit order: each submit's parts (by identity) -> its number, while it is in submit
        self._submitted = 0
        self._numbers: dict[int, int] = {}
        self._last_placed = 0

    async def submit(
        self, parts: list[bytes], nbytes: int, records: int, *, keep_loop_free: bool = False
    ) -> LogMark:
        self._submitted += 1
        self._numbers[id(parts)] = self._submitted
        files = self._sim_files
        files.barriers += not parts
        files.waited += bool(self._admitting) or not self._has_room(records)
        try:
            return await super().submit(parts, nbytes, records, keep_loop_free=keep_loop_free)
        finally:
            del self._numbers[id(parts)]

    def _enqueue(self, parts: list[bytes], nbytes: int, records: int) -> asyncio.Future[LogMark]:
        self._placed(parts)
        return super()._enqueue(parts, nbytes, records)

    def _write_inline(self, parts: list[bytes]) -> LogMark:
        self._placed(parts)
        return super()._write_inline(parts)

    def _placed(self, parts: list[bytes]) -> None:
        """The journal's rule: batches reach the file in the order they were submitted (a
        ledger's master-key record must precede its entries at replay)."""
        number = self._numbers[id(parts)]
        if number < self._last_placed:
            self._sim_files.breaches.append(
                f"{self._sim_files.name}: submit {number} placed after submit {self._last_placed}"
            )
        self._last_placed = max(self._last_placed, number)

    def _start_writer(self) -> None:
        self._writer = self._sim_loop.create_task(self._write_groups())

    def _hand_over(self, batch: JournalBatch | None) -> None:
        self._inbox.append(batch)
        self._arrived.set()

    async def _writer_stopped(self) -> None:
        if self._writer is not None:
            await self._writer
            self._writer = None

    def _writer_abandoned(self) -> None:
        """The process died: the writer stops where it is, and nothing it held completes."""
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None
        for batch in [*self._writing, *self._inbox]:
            if batch is not None and not batch.future.done():
                # what the memory storage's waiters get once it stopped
                batch.future.set_exception(BookieError(bookie_pb2.EIO, "storage is crashed"))
        self._inbox.clear()
        self._writing = []

    async def _write_groups(self) -> None:
        """The writer thread's loop (``Journal._run``): every queued batch is one group, written
        by ``Journal._write_group``, synced while virtual time passes, then completed on the loop
        one turn later. The thread's ``_take`` (and its group wait) blocks, so groups are formed
        here: everything queued when the writer wakes."""
        files = self._sim_files
        while True:
            while not self._inbox:
                self._arrived.clear()
                await self._arrived.wait()
            group: list[JournalBatch] = []
            stopping = False
            while self._inbox:
                batch = self._inbox.popleft()
                if batch is None:
                    stopping = True
                    break
                group.append(batch)
            if group:
                self._writing = group
                me = files.holder = asyncio.current_task()
                started = self._sim_loop.time()
                try:
                    error = self._write_group(group)  # the thread's own code; its sync is deferred
                    if error is None:
                        await files.finish_sync()
                        self._last_sync_s = self._sim_loop.time() - started
                finally:
                    if files.holder is me:
                        files.holder = None
                self._writing = []
                self._sim_loop.call_soon(self._complete, group, self.written_mark, error)
            if stopping:
                return


class JournaledStorage(MemoryLedgerStorage):
    """``MemoryLedgerStorage``'s ledger state, journaled through the real ``Journal`` on
    :class:`SimJournalFiles`. A checkpoint moves the state to the disk and lets replay start at
    the journal's written mark; a crash loses what the files had not synced.

    Unlike the memory storage's, a checkpoint does not cover records still queued for the
    writer: deleting a ledger (a checkpoint, then the deletion) leaves those after the mark, and
    replay brings the ledger back, as with ``DbLedgerStorage``; garbage collection deletes it
    again."""

    def __init__(
        self,
        disk: MemoryDisk,
        files: SimJournalFiles,
        *,
        journal: type[SimJournal] = SimJournal,
        checkpoint_bytes: int = 256 * 1024,
    ) -> None:
        super().__init__(disk, checkpoint_bytes=checkpoint_bytes)
        self.files = files
        self._journal_kind = journal
        self.journal: SimJournal | None = None
        self._since_checkpoint = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        self._load_checkpointed()
        journal = self.journal = self._journal_kind(self.files, loop, self.health)
        for rtype, payload, _ in journal.replay(self.files.checkpoint):
            self._replay(rtype, payload)
        journal.start(loop)
        self._stopped = ""
        self._checkpoint()

    async def close(self) -> None:
        if not self._stopped and self.journal is not None:
            await self.journal.close()
        await super().close()

    def crash(self, rng: random.Random | None = None) -> None:
        self.crash_files(rng)

    def crash_files(self, rng: random.Random | None) -> tuple[int, int]:
        """A power cut: (unsynced journal bytes, of them kept), see ``SimJournalFiles.crash``."""
        lost = (0, 0)
        if self._generation == self.disk.generation and self._stopped != "crashed":
            if self.journal is not None:
                self.journal.abandon()
            lost = self.files.crash(rng)
        self._stop("crashed")
        return lost

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        self._check_running()
        parts, records = self._apply(updates, entries)
        nbytes = sum(map(len, parts))
        journaled = self._submit(parts, nbytes, records, keep_loop_free)
        self._since_checkpoint += nbytes
        if self._since_checkpoint > self._checkpoint_bytes:
            self._checkpoint()
        return journaled

    async def _submit(self, parts: list[bytes], nbytes: int, records: int, keep_loop_free: bool) -> None:
        if parts:
            assert self.journal is not None
            await self.journal.submit(parts, nbytes, records, keep_loop_free=keep_loop_free)

    async def force(self, ledger_id: int) -> None:
        self._check_running()
        assert self.journal is not None
        await self.journal.submit([], 0, 0)  # a barrier, as DbLedgerStorage's

    def _checkpoint(self) -> None:
        """The state written so far becomes the disk's; replay starts after what the journal
        has written (records still queued are in the state, and written after the mark)."""
        super()._checkpoint()
        if self.journal is not None:
            mark = self.journal.written_mark
            self.files.checkpoint = mark
            self.journal.remove_before(mark)
        self._since_checkpoint = 0

    def disk_usage(self) -> DiskInfo:
        used = self._stored_bytes + self.files.nbytes
        return DiskInfo(self.disk.capacity_bytes, max(0, self.disk.capacity_bytes - used))

    def journal_marks(self) -> list[JournalMark]:
        return [JournalMark(JOURNAL_NAME, self.files.checkpoint)]  # the persisted LastLogMark
