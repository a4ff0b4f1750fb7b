"""A simulated bookie disk: the storage branch's ``MemoryLedgerStorage`` over a ``MemoryDisk``,
with fsync latency, latency spikes and power loss drawn from the seed.

The ``MemoryDisk`` outlives bookie crashes. Its journal is durable only up to the last completed
sync; a sync takes the time :meth:`SimDisk.fsync_delay_s` draws. A crash keeps a random prefix of
the unsynced journal (the OS may have written some back), possibly ending in a torn record that
replay's CRC check drops. The broken variant ``ack_before_fsync`` acknowledges writes before
their sync.
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from bookie.api import AddOp, LogMark
from bookie.errors import BookieError
from bookie.storage.api import LedgerUpdate
from bookie.storage.journal import JournalBatch
from bookie.storage.memory import MemoryDisk, MemoryLedgerStorage

from .journal_disk import JournaledStorage, SimJournal, SimJournalFiles
from .loop import SimLoop
from .trace import Trace


@dataclass
class DiskFaults:
    """Per-disk fault knobs, drawn from the seed."""

    fsync_ms: float = 1.0  # typical fsync latency
    spike_probability: float = 0.0  # chance that one fsync takes spike_ms instead
    spike_ms: float = 200.0


@dataclass
class SimDisk:
    name: str
    rng: random.Random
    trace: Trace
    faults: DiskFaults = field(default_factory=DiskFaults)
    memory: MemoryDisk = field(default_factory=MemoryDisk)
    # Broken variant "drop the unsynced-data-loss rule": writes count as acknowledged before fsync.
    ack_before_fsync: bool = False
    # The real journal (``journal_disk``) instead of the memory storage's model of one; its
    # files, and the list their breaches of the journal's rules go to (the world's).
    real_journal: bool = False
    journal_breaches: list[str] = field(default_factory=list)
    journal_files: SimJournalFiles | None = None
    # Broken variants of the real journal: it syncs a batch on the loop beside a queued
    # force() barrier; a submit passes one waiting in line for journalQueueSize room; a write
    # that failed is acknowledged, and the journal goes on.
    inline_beside_barrier: bool = False
    submit_jumps_the_line: bool = False
    ack_failed_write: bool = False
    storage: MemoryLedgerStorage | None = None
    # The nemesis's disk error: the journal's next write or sync fails with EIO (once).
    journal_error_armed: bool = False

    def fsync_delay_s(self) -> float:
        if self.rng.random() < self.faults.spike_probability:
            return self.faults.spike_ms / 1000.0
        return self.typical_fsync_delay_s()

    def typical_fsync_delay_s(self) -> float:
        """A sync without a spike: what a sync the event loop makes itself takes (it blocks the
        one loop, so every simulated process would stall behind a spike)."""
        return self.rng.uniform(0.5, 1.5) * self.faults.fsync_ms / 1000.0

    async def _sync(self, nbytes: int) -> None:
        await asyncio.sleep(self.fsync_delay_s())
        self.raise_armed_error()

    def raise_armed_error(self) -> None:
        """The nemesis's disk error, if armed: raised once."""
        if self.journal_error_armed:
            self.journal_error_armed = False
            self.trace.event(f"disk {self.name}: a journal write fails (EIO)")
            raise OSError(errno.EIO, "Input/output error (simulated)")

    @property
    def journal_failed(self) -> bool:
        """The running storage's journal failed: it refuses writes until the bookie restarts."""
        return self.storage is not None and self.storage.health.journal_failure is not None

    def open(self) -> MemoryLedgerStorage:
        """A storage for a new bookie process over this disk."""
        if self.real_journal and not self.ack_before_fsync:
            if self.journal_files is None:
                loop = asyncio.get_running_loop()
                assert isinstance(loop, SimLoop)
                self.journal_files = SimJournalFiles(
                    self.name,
                    loop,
                    self.fsync_delay_s,
                    self.typical_fsync_delay_s,
                    self.journal_breaches,
                    self.raise_armed_error,
                )
            journal = SimJournal
            if self.inline_beside_barrier:
                journal = _BarrierBlindJournal
            elif self.submit_jumps_the_line:
                journal = _LineJumpingJournal
            elif self.ack_failed_write:
                journal = _FailureBlindJournal
            self.storage = JournaledStorage(self.memory, self.journal_files, journal=journal)
            return self.storage
        kind = _AckBeforeFsync if self.ack_before_fsync else MemoryLedgerStorage
        self.storage = kind(self.memory, sync=self._sync)
        return self.storage

    def crash(self) -> None:
        """Power loss: the unsynced journal is lost, but for a random prefix that may end torn."""
        if isinstance(self.storage, JournaledStorage):
            unsynced, kept = self.storage.crash_files(self.rng)
            self.trace.event(f"disk {self.name} crash: kept {kept} of {unsynced} unsynced journal bytes")
            return
        memory = self.memory
        unsynced = memory.written - memory.synced
        if self.storage is not None:
            self.storage.crash(self.rng)
        kept = memory.written - memory.synced
        self.trace.event(f"disk {self.name} crash: kept {kept} of {unsynced} unsynced journal bytes")


class _AckBeforeFsync(MemoryLedgerStorage):
    """Acknowledges a write at once; its sync still happens (or not) behind the bookie's back."""

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        synced = asyncio.ensure_future(super().write(updates, entries))
        synced.add_done_callback(lambda f: f.cancelled() or f.exception())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _BarrierBlindJournal(SimJournal):
    """The bug a review found in the inline sync: only records counted as outstanding, so a
    ``force()`` barrier (no records) with the writer let a batch be written on the loop while
    the writer was still writing and syncing."""

    def _may_write_inline(self, nbytes: int) -> bool:
        queued = self._queued_batches
        if self._outstanding == 0:
            self._queued_batches = 0  # the barriers queued are not seen
        try:
            return super()._may_write_inline(nbytes)
        finally:
            self._queued_batches = queued


class _LineJumpingJournal(SimJournal):
    """The bug the same review found beside it: a submit that found room went straight to the
    writer, past submits still waiting in line for room (none is ever seen waiting)."""

    @property  # type: ignore[override]
    def _admitting(self) -> int:
        return 0

    @_admitting.setter
    def _admitting(self, value: int) -> None:
        return None


class _FailureBlindJournal(SimJournal):
    """A journal that swallows a failed write: the batch is acknowledged though it never reached
    the file, and the journal goes on as if nothing happened."""

    def _write_group(self, group: list[JournalBatch]) -> BaseException | None:
        super()._write_group(group)
        self._failure = None
        return None

    def _write_inline(self, parts: list[bytes]) -> LogMark:
        try:
            return super()._write_inline(parts)
        except BookieError:
            self._failure = None
            return self.written_mark
