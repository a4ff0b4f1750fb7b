"""The journal: one writer thread doing group commit into preallocated files.

Callers (on the event loop) append whole batches: ``submit(parts, records)`` returns ONE future for
the batch, resolved with the journal position after the batch once it is written and fdatasynced.
The thread drains everything queued, writes it with one ``pwrite`` and one ``fdatasync`` (both
release the GIL), then hands the whole group back to the loop with ONE ``call_soon_threadsafe``.

Why natural group commit instead of always sleeping ``journalMaxGroupWaitMSec``: a lone add (one
outstanding request) would pay the full wait on top of the fsync, and our latency budget (p50 <= 1.5
ms through gRPC) has no room for it. Under load, batches pile up while the previous fsync runs, so
groups form by themselves. We wait (in 100 µs slices, at most the configured group wait, up to the
buffered-writes threshold) only when the drained group already held several batches, i.e. when
data is actually arriving concurrently, and stop waiting the moment a slice brings nothing new.

A small batch that finds the journal idle skips the thread: the loop writes and syncs it itself
(``_write_inline``), which spares a lone add two thread wake-ups at each bookie of its quorum.

Files are kept zero-filled ``journalPreAllocSizeMB`` ahead of the write offset by a helper thread
(``journal_file``), so the per-group ``fdatasync`` seldom has to commit a file-size change.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bkproto.v1 import bookie_pb2
from bookie.api import LogMark
from bookie.errors import BookieError

from .config import StorageConfig
from .health import StorageHealth
from .journal_file import AppendFile, JournalDirectory, JournalFiles
from .journal_format import FILE_HEADER_SIZE, RecordType, ScanEnd, check_file_header, file_name
from .stats import StorageStats

log = logging.getLogger(__name__)

_WAIT_SLICE_S = 0.0001
# A small batch that finds the journal idle for this long is written and synced on the loop's
# thread (see ``_write_inline``). Under load batches come closer together than this, or larger:
# they keep the writer thread, so the loop stages the next batch while the last one syncs. A disk
# whose last sync took longer than _INLINE_MAX_SYNC_S keeps every batch on the thread: the loop
# serves reads and other connections, and must not stall behind a slow disk.
_INLINE_AFTER_IDLE_S = 0.0002
_INLINE_MAX_BYTES = 16 * 1024
_INLINE_MAX_SYNC_S = 0.001


@dataclass(slots=True)
class JournalBatch:
    """One submit's records, queued for the writer; ``future`` is its completion."""

    parts: list[bytes]
    nbytes: int
    records: int
    future: asyncio.Future[LogMark]
    enqueued_at: float


@dataclass(frozen=True)
class JournalSettings:
    directory: Path
    pre_alloc_bytes: int
    max_file_bytes: int
    max_backups: int
    queue_size: int
    group_wait_s: float
    buffered_writes_threshold: int
    flush_when_queue_empty: bool
    sync_data: bool
    remove_pages_from_cache: bool = True
    thread_name: str = "bookie-journal"

    @classmethod
    def from_config(cls, config: StorageConfig, index: int) -> JournalSettings:
        """The settings of journal ``index`` of ``config.journal_dirs``."""
        mib = 1024 * 1024
        return cls(
            directory=Path(config.journal_dirs[index]) / "current",
            pre_alloc_bytes=config.journal_pre_alloc_size_mb * mib,
            max_file_bytes=config.journal_max_size_mb * mib,
            max_backups=config.journal_max_backups,
            queue_size=config.journal_queue_size,
            group_wait_s=config.journal_max_group_wait_ms / 1000.0,
            buffered_writes_threshold=config.journal_buffered_writes_threshold,
            flush_when_queue_empty=config.journal_flush_when_queue_empty,
            sync_data=config.journal_sync_data,
            remove_pages_from_cache=config.journal_remove_pages_from_cache,
            thread_name="bookie-journal" if len(config.journal_dirs) == 1 else f"bookie-journal-{index}",
        )


class Journal:
    """``files`` and ``clock`` are seams for the simulation (``tests/sim/journal_disk.py``), which
    also runs the writer as a task on its loop (the ``_start_writer``, ``_hand_over``,
    ``_writer_stopped`` and ``_writer_abandoned`` hooks, around the thread's ``_write_group``): by
    default the files are ``settings.directory``'s and the clock is ``time.perf_counter``."""

    def __init__(
        self,
        settings: JournalSettings,
        stats: StorageStats,
        health: StorageHealth | None = None,
        *,
        files: JournalFiles | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._s = settings
        self._stats = stats
        self._health = health or StorageHealth()
        if files is None:
            files = JournalDirectory(
                settings.directory, settings.pre_alloc_bytes, settings.remove_pages_from_cache
            )
        self._files = files
        self._clock = clock
        # Batches for the writer thread; ``None`` tells it to stop once what precedes it is
        # written. A C SimpleQueue, not a Condition around a list: the loop hands over a batch
        # per add message, and Condition.notify (Python-level lock juggling) was a visible share
        # of the bookie's GIL time (docs/performance.md).
        self._queue: queue.SimpleQueue[JournalBatch | None] = queue.SimpleQueue()
        self._closing = False
        self._abandoned = False
        self._stop_seen = False  # writer thread only
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._file: AppendFile | None = None
        self._failure: BaseException | None = None
        # position after the last record written (read by the loop at write-cache swap)
        self.written_mark = LogMark(0, 0)
        self._first_new_id = 1  # raised by replay() past the mark it replayed from
        # records submitted but not completed: the bound of journalQueueSize (loop only)
        self._outstanding = 0
        self._room = asyncio.Event()
        # Batches handed to the writer thread and not completed, a force() barrier of no
        # records included (loop only): while any is, the thread may be using the file.
        self._queued_batches = 0
        # Submits waiting in line for journalQueueSize room (loop only), and their line.
        self._admitting = 0
        self._admission = asyncio.Lock()
        # when the journal last had no batch queued (loop only), and how long the last write
        # and sync took (either thread): see ``_write_inline``
        self._idle_since = 0.0
        self._last_sync_s = 0.0

    @property
    def directory(self) -> Path:
        return self._s.directory

    # ---- start-up -------------------------------------------------------------------------

    def file_ids(self) -> list[int]:
        return self._files.ids()

    def replay(self, mark: LogMark) -> Iterator[tuple[RecordType, memoryview, LogMark]]:
        """Every valid record after ``mark`` in file order; a damaged record ends its file."""
        # The next file must come after the mark, or the next replay would skip it: a mark
        # can name a file no longer there (its directory wiped by hand, say).
        self._first_new_id = max(self._first_new_id, mark.journal_id + 1)
        for journal_id in self.file_ids():
            if journal_id < mark.journal_id:
                continue
            path = self._s.directory / file_name(journal_id)
            records = self._files.records(
                journal_id, mark.offset if journal_id == mark.journal_id else FILE_HEADER_SIZE
            )
            if not check_file_header(records.header(), journal_id):
                log.warning("journal %s has no valid header; skipped", path)
                continue
            records.start = max(records.start, FILE_HEADER_SIZE)
            for rtype, payload, end in records:
                yield rtype, payload, LogMark(journal_id, end)
            why, end = records.why, records.end
            if why is not ScanEnd.CLEAN:
                log.warning(
                    "journal %s: %s record at offset %d; replay of this file stops there",
                    path,
                    why.name.lower(),
                    end,
                )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open a fresh file (never append after a possibly torn tail) and start the writer."""
        self._loop = loop
        self._room = asyncio.Event()
        self._admission = asyncio.Lock()
        ids = self.file_ids()
        try:
            self._open_file(max((ids[-1] + 1) if ids else 1, self._first_new_id))
        except OSError as exc:  # a full disk: start without writes (read-only) rather than not at all
            log.error("journal %s: cannot open a new file: %s", self._s.directory, exc)
            self._failure = exc
            self._health.journal_failed(self._s.directory, exc)
        self._start_writer()

    # ---- loop side ------------------------------------------------------------------------

    async def submit(
        self, parts: list[bytes], nbytes: int, records: int, *, keep_loop_free: bool = False
    ) -> LogMark:
        """Journal ``parts`` (already encoded records); return once written (and synced).
        ``keep_loop_free``: the caller has other work waiting on the loop, so the batch goes to
        the writer thread even when the journal is idle (see ``_write_inline``)."""
        self._check_open()
        if self._admitting == 0:
            if not keep_loop_free and self._may_write_inline(nbytes):
                return self._write_inline(parts)
            if self._has_room(records):
                return await self._enqueue(parts, nbytes, records)
        # Backpressure (journalQueueSize records in flight), in line: a batch that waited must
        # not be passed by a later one, whose records may need its own (a ledger's master key
        # before its entries) at replay.
        self._admitting += 1
        try:
            async with self._admission:
                while not self._has_room(records):
                    self._room.clear()
                    await self._room.wait()
                self._check_open()  # the writer thread may be gone, or failing every batch
                queued = self._enqueue(parts, nbytes, records)
        finally:
            self._admitting -= 1
        return await queued

    def _check_open(self) -> None:
        if self._failure is not None:
            raise BookieError(bookie_pb2.EIO, f"journal failed: {self._failure}")
        if self._closing:
            raise BookieError(bookie_pb2.EIO, "journal is closed")

    def _has_room(self, records: int) -> bool:
        return self._outstanding == 0 or self._outstanding + records <= self._s.queue_size

    def _may_write_inline(self, nbytes: int) -> bool:
        """Whether a batch of ``nbytes`` may be written by the loop itself (``_write_inline``)."""
        file = self._file
        return (
            nbytes <= _INLINE_MAX_BYTES
            and self._queued_batches == 0
            and self._last_sync_s <= _INLINE_MAX_SYNC_S
            and self._clock() - self._idle_since >= _INLINE_AFTER_IDLE_S
            # a rollover (closing a file, creating and syncing the next) stays on the thread
            and file is not None
            and file.offset + nbytes <= self._s.max_file_bytes
        )

    def _enqueue(self, parts: list[bytes], nbytes: int, records: int) -> asyncio.Future[LogMark]:
        """Hand a batch to the writer thread; the future is its completion."""
        assert self._loop is not None
        future: asyncio.Future[LogMark] = self._loop.create_future()
        self._outstanding += records
        self._queued_batches += 1
        self._hand_over(JournalBatch(parts, nbytes, records, future, self._clock()))
        return future

    def _complete(self, group: list[JournalBatch], mark: LogMark, error: BaseException | None) -> None:
        now = self._clock()
        if error is not None:
            self._health.journal_failed(self._s.directory, error)
        self._queued_batches -= len(group)
        for batch in group:
            self._outstanding -= batch.records
            if batch.future.done():
                continue
            if error is None:
                batch.future.set_result(mark)
            else:
                batch.future.set_exception(BookieError(bookie_pb2.EIO, f"journal write failed: {error}"))
            self._stats.journal_add_entry.observe((now - batch.enqueued_at) * 1000.0)
        if self._queued_batches == 0:
            self._idle_since = now
        self._room.set()

    def _write_inline(self, parts: list[bytes]) -> LogMark:
        """Write and sync a batch on the loop's thread, the writer thread being idle.

        Why: handing a lone batch to the writer thread and back costs two thread wake-ups, and
        on a busy two-core box each waits for a core; a lone add pays them at every bookie of its
        quorum. The loop is blocked for one ``pwrite`` and one ``fdatasync`` (both release the
        GIL), which a journal idle for ``_INLINE_AFTER_IDLE_S`` on a fast disk can afford.

        Safe against the writer thread: with no batch queued, every batch it took (a barrier of
        no records too) has been completed here, so it is waiting on its queue and touches
        neither the file nor the mark until the next ``put``, which comes after this returns."""
        started = self._clock()
        try:
            if parts:
                self._write_synced(b"".join(parts))
        except Exception as exc:  # disk trouble: fail this batch and every later one
            log.exception("journal write failed")
            self._failure = exc
            self._health.journal_failed(self._s.directory, exc)
            raise BookieError(bookie_pb2.EIO, f"journal write failed: {exc}") from exc
        finally:
            self._idle_since = now = self._clock()
        self._stats.journal_add_entry.observe((now - started) * 1000.0)
        return self.written_mark

    @property
    def outstanding(self) -> int:
        """Records submitted and not yet completed (the journal queue size gauge)."""
        return self._outstanding

    async def close(self) -> None:
        """Write out what is queued, stop the thread, close the file."""
        if not self._closing:
            self._closing = True
            self._hand_over(None)
        await self._writer_stopped()
        self._close_file()

    def abandon(self) -> None:
        """Stop without waiting (tests simulating a crash): the thread exits after its group."""
        self._abandoned = True
        self._closing = True
        self._hand_over(None)
        self._writer_abandoned()
        self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # ---- writer thread --------------------------------------------------------------------

    def _start_writer(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._s.thread_name, daemon=True)
        self._thread.start()

    def _hand_over(self, batch: JournalBatch | None) -> None:
        """Queue a batch for the writer (``None``: stop once what precedes it is written)."""
        self._queue.put(batch)

    async def _writer_stopped(self) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _writer_abandoned(self) -> None:
        if self._thread is not None:
            self._thread.join()  # at most one group write: tests only
            self._thread = None

    def _take(self) -> list[JournalBatch] | None:
        """The next group: everything queued (waiting for the first batch), or ``None`` once
        the stop marker comes with nothing before it."""
        if self._stop_seen:
            return None
        first = self._queue.get()
        if first is None or self._abandoned:
            return None
        group = [first]
        stopping = self._drain_into(group)
        # Wait for more only when several batches came at once, i.e. data is arriving concurrently.
        wait = not self._s.flush_when_queue_empty and self._s.group_wait_s > 0
        if wait and not stopping and len(group) > 1:
            self._gather_more(group)
        return group

    def _drain_into(self, group: list[JournalBatch]) -> bool:
        """Move every queued batch into ``group``; True if the stop marker was among them."""
        get = self._queue.get_nowait
        while True:
            try:
                batch = get()
            except queue.Empty:
                return False
            if batch is None:
                self._stop_seen = True
                return True
            group.append(batch)

    def _gather_more(self, group: list[JournalBatch]) -> None:
        nbytes = sum(b.nbytes for b in group)
        deadline = time.perf_counter() + self._s.group_wait_s
        while nbytes < self._s.buffered_writes_threshold:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            try:
                batch = self._queue.get(timeout=min(remaining, _WAIT_SLICE_S))
            except queue.Empty:
                return  # nothing arrived in a slice: stop waiting
            if batch is None:
                self._stop_seen = True
                return
            more = [batch]
            stop = self._drain_into(more)
            group.extend(more)
            nbytes += sum(b.nbytes for b in more)
            if stop:
                return

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            group = self._take()
            if group is None:
                return
            error = self._write_group(group)
            try:
                loop.call_soon_threadsafe(self._complete, group, self.written_mark, error)
            except RuntimeError:
                return  # loop closed (crash simulation / interpreter exit)

    def _write_group(self, group: list[JournalBatch]) -> BaseException | None:
        """Write and sync a group (the writer's); the failure, which fails this group and every
        later one."""
        try:
            if self._failure is not None:
                raise self._failure
            self._write_synced(b"".join([p for batch in group for p in batch.parts]))
        except Exception as exc:  # disk trouble
            log.exception("journal write failed")
            self._failure = exc
            return exc
        return None

    def _write_synced(self, data: bytes) -> None:
        started = self._clock()
        self._write(data)
        if self._s.sync_data:
            self._current().sync()
        self._last_sync_s = elapsed = self._clock() - started
        self._stats.journal_sync.observe(elapsed * 1000.0)
        self._stats.journal_write_bytes.inc(len(data))

    def _current(self) -> AppendFile:
        assert self._file is not None, "journal not started"
        return self._file

    def _write(self, data: bytes) -> None:
        file = self._current()
        if file.offset + len(data) > self._s.max_file_bytes and file.offset > FILE_HEADER_SIZE:
            file.close()
            self._file = None  # if the next cannot be opened, close() must not close this again
            self._open_file(file.journal_id + 1)
            file = self._current()
        self.written_mark = LogMark(file.journal_id, file.append(data))

    def _open_file(self, journal_id: int) -> None:
        started, ok = time.perf_counter(), False
        try:  # BookKeeper's JOURNAL_CREATION_LATENCY: a rollover's file costs the writer this long
            self._file = self._files.create(journal_id)
            ok = True
        finally:
            self._stats.journal_creation.observe((time.perf_counter() - started) * 1000.0, success=ok)
        self.written_mark = LogMark(journal_id, self._file.offset)

    # ---- housekeeping ---------------------------------------------------------------------

    def remove_before(self, mark: LogMark) -> list[int]:
        """Delete files wholly before the checkpoint, keeping ``journalMaxBackups`` of them."""
        old = [i for i in self.file_ids() if i < mark.journal_id and i != self.written_mark.journal_id]
        doomed = old[: max(0, len(old) - self._s.max_backups)]
        for journal_id in doomed:
            self._files.remove(journal_id)
        return doomed
