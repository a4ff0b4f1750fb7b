"""DbLedgerStorage: journal + double-buffered write cache + entry logs + indexes + read cache.

Safety order (what makes LastLogMark correct): an entry goes into the write cache BEFORE its journal
record is enqueued, and ledger-index changes are applied BEFORE their journal record is enqueued.
At a write-cache swap the mark is taken as the journal position of the last record already
written; every record before it therefore has its entry in the swapped half (or an older, already
flushed one) and its index change in RocksDB. The flush makes those durable (entry log fsync, index
WAL sync) and only then persists the mark and deletes journal files wholly before it.

Everything here that can stall (fsync, pwrite, cold pread, replay) runs on threads; the event loop
only touches dicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Awaitable, Collection, Coroutine, Sequence
from operator import itemgetter
from pathlib import Path

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, DiskInfo, JournalMark, LogMark
from bookie.errors import BookieError

from .api import LedgerRecord, LedgerUpdate, apply_update
from .compaction import ByteThrottle, Compacted
from .config import StorageConfig
from .flush_pacer import BUDGET_SHARE_OF_FILL_TIME, HURRY_AT_ACTIVE_SHARE, FlushPacer
from .health import StorageHealth
from .journal import Journal, JournalSettings
from .journal_format import RecordType, entry_records, record_update, update_record
from .kv import RocksTuning
from .last_mark import mark_file_name, mark_order, read_mark, write_mark
from .ledger_directory import IndexWriteError, KvFactory, LedgerDirectory, rocks_kv, tuned_rocks_kv
from .log_garbage import LogFacts, LogUsage
from .range_read import RecentRuns, RunReader, read_range
from .read_cache import ReadCache
from .read_pool import ReadPool
from .stats import StorageStats
from .write_cache import WriteCache, WriteCacheHalf

log = logging.getLogger(__name__)
_BODY = itemgetter(3)  # AddOp.body, read in C


class DbLedgerStorage:
    def __init__(self, config: StorageConfig, stats: StorageStats, kv_factory: KvFactory = rocks_kv) -> None:
        self.config = config
        self.stats = stats
        tuning = config.rocksdb_tuning()
        # the operator's RocksDB options apply to the real indexes; a test's factory is left alone
        tuned = kv_factory is rocks_kv and tuning != RocksTuning()
        self._kv_factory = tuned_rocks_kv(tuning) if tuned else kv_factory
        self.health = StorageHealth()
        self.dirs: list[LedgerDirectory] = []
        # One journal per journal dir, each with its own writer thread and LastLogMark; a ledger's
        # records all go to journal ``ledger_id % len(journals)`` (BookKeeper's rule), so each
        # ledger's records stay in order within one journal.
        count = len(config.journal_dirs)
        self.journals = [
            Journal(JournalSettings.from_config(config, index), stats, self.health) for index in range(count)
        ]
        self._mark_files = [mark_file_name(index, count) for index in range(count)]
        # read at scrape time: no gauge update on the add path
        stats.journal_queue_size.set_function(lambda: sum(j.outstanding for j in self.journals))
        self.write_cache = WriteCache(config.write_cache_bytes)
        stats.write_cache_size.set_function(lambda: self.write_cache.size)
        self.read_cache = ReadCache(config.read_cache_bytes)
        # range reads' entry-log runs: half the read-ahead cache's bound again (range_read.py)
        self.recent_runs = RecentRuns(config.read_cache_bytes // 2)
        self.read_pool = ReadPool.from_config(config, stats)
        self.marks = [LogMark(0, 0)] * count  # last persisted LastLogMark of each journal
        self.replayed_records = 0
        self._flush_task: asyncio.Task[None] | None = None
        self._pacer = FlushPacer(0, 0.0)  # the running (or last) flush's
        self._filling_since = time.monotonic()  # when the active half started to fill
        self._flush_done = asyncio.Event()
        # held by the flush's worker thread: abandon() waits on it before closing the indexes
        self._flush_thread_busy = threading.Lock()
        self._abandoned = False  # set by abandon() under that lock: a later flush writes nothing
        self._timer: asyncio.Task[None] | None = None
        self._closed = False

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._flush_done = asyncio.Event()
        replay_failure = await asyncio.to_thread(self._open_and_replay)
        for journal in self.journals:
            journal.start(loop)
        # Checkpoint what replay put back, so the next start does not replay it again. If a
        # flush fails (e.g. a full disk; it logs why), the entries stay in the write cache and
        # the journal, and the health report makes the bookie read-only: it starts, serves
        # reads, and garbage collection can free space.
        if replay_failure is not None:
            self._report_failure(replay_failure)
        else:
            with contextlib.suppress(Exception):
                await self._run_flush()
        self._timer = asyncio.create_task(self._flush_timer(), name="bookie-flush-timer")

    def _open_and_replay(self) -> BaseException | None:
        """Open the directories and replay the journals into the write cache, flushing when it
        fills. A flush that fails stops the flushing, not the replay: the cache then holds more
        than its size, at most what the journals hold past their marks (the bookie refuses adds
        once its cache is full, so that is about one cache). Returns that failure."""
        roots = [Path(d) for d in self.config.ledger_dirs]
        config = self.config
        self.dirs = [
            LedgerDirectory(
                r,
                config.entry_log_size_limit,
                self._kv_factory,
                reserve_bytes=config.entry_log_reserve_bytes,
                page_cache_keep=config.entry_log_page_cache_bytes,
            )
            for r in roots
        ]
        self.marks = [read_mark(roots, name) for name in self._mark_files]
        started = time.perf_counter()
        failure: BaseException | None = None
        for index, journal in enumerate(self.journals):
            # A flush during replay checkpoints this journal up to the record just applied; the
            # journals replayed before it are wholly in the cache or flushed, the later ones not
            # touched yet, so their marks stay.
            marks = list(self.marks)
            for rtype, payload, position in journal.replay(self.marks[index]):
                self._apply(rtype, payload)
                self.replayed_records += 1
                if failure is None and self.write_cache.active.size >= self.write_cache.half_capacity:
                    marks[index] = position
                    half = self.write_cache.swap()
                    flushed: list[int] = []
                    try:
                        self._flush_sync(half, marks, FlushPacer(0, 0.0), flushed)
                    except Exception as exc:  # e.g. a full disk: replay the rest into the cache
                        log.exception("write-cache flush during journal replay failed")
                        failure = exc
                        self._keep_unflushed(half, flushed)
                    else:
                        self.write_cache.flush_done()
        log.info("replayed %d journal records from %s in %.1f s", self.replayed_records,
                 ", ".join(map(str, self.marks)), time.perf_counter() - started)
        return failure

    def _apply(self, rtype: RecordType, payload: memoryview) -> None:
        if rtype is RecordType.ENTRY:
            body = bytes(payload)
            ledger_id, entry_id = HEADER.unpack_from(body)[:2]
            self.write_cache.put(ledger_id, entry_id, body)
            return
        update = record_update(rtype, payload)
        if not self._update_index(update):
            log.warning(
                "journal %s record of ledger %d has no master key; skipped", rtype.name, update.ledger_id
            )

    def _update_index(self, update: LedgerUpdate) -> bool:
        """Apply ``update`` to the ledger index; False if the ledger has no record to change."""
        index = self.dir_for(update.ledger_id).ledgers
        old = index.get(update.ledger_id)
        record = apply_update(old, update)
        if record is None:
            return False
        if record is not old:  # e.g. a replayed key record of a ledger already indexed
            index.put(update.ledger_id, record)
        return True

    async def close(self) -> None:
        """Journal drained, write cache flushed, mark checkpointed at the journal's end."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for journal in self.journals:
            await journal.close()
        with contextlib.suppress(Exception):
            await self._wait_flush()
        if self.health.index_failure is None:
            await self._run_flush()
        else:  # it would only write the cache to the entry logs once more, then fail
            log.warning("not flushing at close: %s; the journal keeps the unflushed entries",
                        self.health.index_failure)
        self.read_pool.close()
        await asyncio.to_thread(self._close_dirs)

    def _close_dirs(self) -> None:
        for d in self.dirs:
            d.close()

    def abandon(self) -> None:
        """Crash simulation for in-process tests: stop the journal thread, start no flush and no
        checkpoint; only release the RocksDB handles (their lock) so the same process can reopen.
        A flush already on its worker thread is hurried and waited for (a crash just after it):
        closing RocksDB under it would fail it, or fail this call with "Already borrowed". One
        not yet on its thread writes nothing (a crash just before it)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for journal in self.journals:
            journal.abandon()
        self._pacer.hurry()
        with self._flush_thread_busy:
            self._abandoned = True
            for d in self.dirs:
                d.close_indexes()

    # ---- write path -------------------------------------------------------------------------

    def dir_for(self, ledger_id: int) -> LedgerDirectory:
        return self.dirs[ledger_id % len(self.dirs)]

    def journal_index(self, ledger_id: int) -> int:
        return ledger_id % len(self.journals)

    def journal_for(self, ledger_id: int) -> Journal:
        return self.journals[self.journal_index(ledger_id)]

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        """Ledger-index changes and write-cache puts now, BEFORE their journal records are
        enqueued (the LastLogMark rule, see the module docstring); the journal submission (one
        per journal the write touches) happens when the result is awaited. A failed journal fails
        the whole write, even the part another journal synced: a client may be told of a failure
        for an entry that is durable, never the reverse (and the failure turns the bookie
        read-only anyway)."""
        journals = self.journals
        if len(journals) == 1:
            return self._submit(journals[0], *self._stage(updates, entries), keep_loop_free)
        # Several journals: each journal gets the records of its ledgers, side by side.
        update_groups: dict[int, list[LedgerUpdate]] = {}
        entry_groups: dict[int, list[AddOp]] = {}
        for update in updates:
            update_groups.setdefault(self.journal_index(update.ledger_id), []).append(update)
        for op in entries:
            entry_groups.setdefault(self.journal_index(op.ledger_id), []).append(op)
        # Two or more journals sync side by side on their threads, not one after another on the loop.
        touched = sorted(update_groups.keys() | entry_groups.keys())
        keep_loop_free = keep_loop_free or len(touched) > 1
        staged = [
            (journals[j], *self._stage(update_groups.get(j, ()), entry_groups.get(j, ())), keep_loop_free)
            for j in touched
        ]
        return _submit_all([self._submit(*submission) for submission in staged])

    def _stage(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp]
    ) -> tuple[list[bytes], int, int]:
        """Apply and encode: (journal parts, their bytes, their records)."""
        parts = [update_record(update) for update in updates if self._update_index(update)]
        records = len(parts) + len(entries)
        nbytes = sum(map(len, parts))
        if entries:
            entry_parts, entry_bytes, crcs = entry_records(list(map(_BODY, entries)))
            self.write_cache.active.put_all(entries, crcs)  # the entry log's CRCs too (one pass each)
            parts += entry_parts
            nbytes += entry_bytes
        self.after_put()
        return parts, nbytes, records

    async def _submit(
        self, journal: Journal, parts: list[bytes], nbytes: int, records: int, keep_loop_free: bool
    ) -> None:
        if parts:
            await journal.submit(parts, nbytes, records, keep_loop_free=keep_loop_free)

    async def force(self, ledger_id: int) -> None:
        # a barrier: completes after everything queued before it in the ledger's journal is synced
        await self.journal_for(ledger_id).submit([], 0, 0)

    async def make_room(self, nbytes: int) -> None:
        """Backpressure: wait (bounded by dbStorage_maxThrottleTimeMs) for write-cache room."""
        cache = self.write_cache
        if cache.has_room(nbytes):
            return
        if self.health.index_failure is not None:
            raise BookieError(
                bookie_pb2.EIO, f"write cache is full and cannot be flushed: {self.health.index_failure}"
            )
        if cache.flushing is None:
            self._start_flush()  # the usual swap: the fresh half has room at once
            if cache.has_room(nbytes):
                return
        self.stats.throttled_adds.inc()  # both halves full: this add waits for the flush
        self._pacer.hurry()
        deadline = time.monotonic() + self.config.max_throttle_time_ms / 1000.0
        while not cache.has_room(nbytes):
            if cache.flushing is None:
                self._start_flush(paced=False)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stats.rejected_adds.inc()
                raise BookieError(bookie_pb2.ETOOMANYREQUESTS, "write cache is full; flush is behind")
            self._flush_done.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flush_done.wait(), remaining)

    def after_put(self) -> None:
        cache = self.write_cache
        if self.health.index_failure is not None:
            return  # flushes cannot succeed before a restart (make_room refuses once full)
        if cache.active.size >= cache.half_capacity and cache.flushing is None and not self._closed:
            self._start_flush()
        elif cache.flushing is not None and cache.active.size >= cache.half_capacity * HURRY_AT_ACTIVE_SHARE:
            self._pacer.hurry()  # filling faster than the last half did: finish the flush sooner

    # ---- flush / checkpoint -----------------------------------------------------------------

    def _start_flush(self, *, paced: bool = True) -> None:
        """Flush the active half; ``paced`` spreads it over part of the time the half took to fill
        (see ``flush_pacer``)."""
        half = self.write_cache.swap()
        marks = [journal.written_mark for journal in self.journals]
        now = time.monotonic()
        # at most a flush interval: the checkpoint waits for the flush, and the next is due then
        fill_time = min(now - self._filling_since, self.config.flush_interval_ms / 1000.0)
        budget = fill_time * BUDGET_SHARE_OF_FILL_TIME if paced else 0.0
        self._filling_since = now
        self._pacer = FlushPacer(half.size, budget, self.write_cache.active_share)
        self._flush_task = asyncio.create_task(self._flush(half, marks), name="bookie-flush")
        self._flush_task.add_done_callback(_failure_seen)

    async def _flush(self, half: WriteCacheHalf, marks: list[LogMark]) -> None:
        started = time.perf_counter()
        flushed: list[int] = []
        try:
            await asyncio.to_thread(self._flush_sync, half, marks, self._pacer, flushed)
        except Exception as exc:
            if isinstance(exc, IndexWriteError) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
                # A full disk or RocksDB's own refusal: the message says why, in one line. A
                # traceback would only show our call path, and reads as a crash in a log.
                log.error("write-cache flush failed: %s", exc)
            else:
                log.exception("write-cache flush failed")
            self._keep_unflushed(half, flushed)
            self._report_failure(exc)
            raise
        finally:
            self._flush_done.set()
        self.health.flush_succeeded()
        self.write_cache.flush_done()
        self.stats.flush.observe((time.perf_counter() - started) * 1000.0)

    def _keep_unflushed(self, half: WriteCacheHalf, flushed: list[int]) -> None:
        """After a failed flush: the ledgers directories did write and index (``flushed``) leave
        the half, so a retry does not write them again; the rest goes back into the active half,
        readable, and still journaled (the mark did not move), to be retried."""
        for ledger_id in flushed:
            half.drop_ledger(ledger_id)
        self.write_cache.active, self.write_cache.flushing = half.absorb(self.write_cache.active), None

    def _report_failure(self, exc: BaseException) -> None:
        if isinstance(exc, IndexWriteError):
            self.health.index_failed(exc)
        else:
            self.health.flush_failed(exc)

    def _flush_sync(
        self, half: WriteCacheHalf, marks: list[LogMark], pacer: FlushPacer, flushed: list[int]
    ) -> None:
        """Write ``half`` to the entry logs and indexes, then checkpoint each journal at its
        mark of the swap (``marks``, one per journal). ``flushed`` gets the ids of the ledgers
        written and indexed, directory by directory, for :meth:`_keep_unflushed`."""
        with self._flush_thread_busy:
            if self._abandoned:
                return  # the simulated crash came first
            per_dir: list[list[tuple[int, dict[int, bytes]]]] = [[] for _ in self.dirs]
            n = len(self.dirs)
            for ledger in half.sorted_ledgers():
                per_dir[ledger[0] % n].append(ledger)
            done_work = 0.0
            for directory, ledgers in zip(self.dirs, per_dir, strict=True):
                done_work = directory.flush_ledgers(ledgers, pacer, done_work, half.crcs)
                flushed.extend(ledger_id for ledger_id, _ in ledgers)
            roots = [d.root for d in self.dirs]
            for index, (journal, mark) in enumerate(zip(self.journals, marks, strict=True)):
                if mark_order(mark) > mark_order(self.marks[index]):
                    write_mark(roots, mark, self._mark_files[index])
                    self.marks[index] = mark
                    removed = journal.remove_before(mark)
                    if removed:
                        log.info("removed journal files %s of %s (before %s)",
                                 removed, journal.directory, mark)

    async def _wait_flush(self) -> None:
        task = self._flush_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def _run_flush(self) -> None:
        """Flush the active half now (after any running flush) and checkpoint."""
        self._pacer.hurry()
        await self._wait_flush()
        self._start_flush(paced=False)
        await self._wait_flush()

    async def checkpoint(self) -> None:
        await self._run_flush()

    async def _flush_timer(self) -> None:
        interval = self.config.flush_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            behind = any(
                mark_order(journal.written_mark) > mark_order(mark)
                for journal, mark in zip(self.journals, self.marks, strict=True)
            )
            dirty = self.write_cache.active.size > 0 or behind
            if dirty and self.write_cache.flushing is None and self.health.index_failure is None:
                self._start_flush()
                with contextlib.suppress(Exception):
                    await self._wait_flush()

    # ---- admin ------------------------------------------------------------------------------

    def disk_usage(self) -> DiskInfo:
        total = free = 0
        seen: set[int] = set()
        for directory in self.config.ledger_dirs:
            st = os.statvfs(directory)
            if st.f_fsid in seen:
                continue  # several dirs on one filesystem count once
            seen.add(st.f_fsid)
            total += st.f_blocks * st.f_frsize
            free += st.f_bavail * st.f_frsize
        return DiskInfo(total_bytes=total, free_bytes=free)

    def journal_marks(self) -> list[JournalMark]:
        dirs = self.config.journal_dirs
        return [JournalMark(Path(d), mark) for d, mark in zip(dirs, self.marks, strict=True)]

    # ---- garbage collection ------------------------------------------------------------------

    async def local_ledger_ids(self) -> set[int]:
        """Every ledger this bookie stores (the ledger indexes of all directories)."""
        ids = await asyncio.gather(*(asyncio.to_thread(d.ledgers.ids) for d in self.dirs))
        return set().union(*ids)

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """BookKeeper's ``deleteLedger`` for each: cached entries dropped now, the records and
        entry locations durably (a flush already running skips them: see ``LedgerDirectory``)."""
        for ledger_id in ledger_ids:
            self.write_cache.drop_ledger(ledger_id)
        self.read_cache.drop_ledgers(ledger_ids)
        self.recent_runs.drop_ledgers(ledger_ids)
        by_dir: dict[int, list[int]] = {}
        for ledger_id in ledger_ids:
            by_dir.setdefault(ledger_id % len(self.dirs), []).append(ledger_id)
        # every directory's thread runs to its end before this returns or raises, so the caller
        # knows no deletion is still going on
        outcomes = await asyncio.gather(
            *(asyncio.to_thread(self.dirs[index].delete_ledgers, ids) for index, ids in by_dir.items()),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def reclaim_entry_logs(self) -> LogUsage:
        """Delete the entry logs left with no live ledger; totals over all directories."""
        found = await asyncio.gather(*(asyncio.to_thread(d.garbage.reclaim) for d in self.dirs))
        return LogUsage(
            sum(u.deleted_logs for u in found),
            sum(u.reclaimed_bytes for u in found),
            sum(u.active_logs for u in found),
            sum(u.active_bytes for u in found),
        )

    async def entry_log_facts(self) -> list[LogFacts]:
        """Every entry log of every directory, for ``gcexplain``."""
        found = await asyncio.gather(*(asyncio.to_thread(d.garbage.facts) for d in self.dirs))
        return [f for facts in found for f in facts]

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted:
        """Compact, one directory after the other, the logs whose live share is below
        ``threshold``, at most ``rate_bytes`` per second overall (0: no limit), until ``stop``
        is set."""
        throttle = ByteThrottle(rate_bytes, stop, self.config.compaction_rate_entries)

        def compact_all() -> Compacted:
            done = []
            for directory in self.dirs:
                if stop is not None and stop.is_set():
                    break
                done.append(directory.garbage.compact(threshold, throttle))
            return Compacted(sum(c.logs for c in done), sum(c.reclaimed_bytes for c in done))

        return await asyncio.to_thread(compact_all)

    # ---- read path --------------------------------------------------------------------------

    async def read(self, ledger_id: int, entry_id: int) -> bytes | None:
        started, body = time.perf_counter(), None
        try:  # DbLedgerStorage's read-entry op stat: every read, a miss (or error) as a failure
            body = await self._read(ledger_id, entry_id)
            return body
        finally:
            self.stats.read_entry.observe((time.perf_counter() - started) * 1000.0, success=body is not None)

    async def _read(self, ledger_id: int, entry_id: int) -> bytes | None:
        body = self.write_cache.get(ledger_id, entry_id)
        if body is not None:
            self.stats.write_cache_hits.inc()
            return body
        body = self.read_cache.get(ledger_id, entry_id)
        if body is not None:
            self.stats.read_cache_hits.inc()
            return body
        self.stats.read_cache_misses.inc()
        run = await self.read_pool.run(
            self.dir_for(ledger_id).read_run, ledger_id, entry_id,
            1 + self.config.read_ahead_batch_size, max(1, self.read_cache.max_bytes // 2),
        )  # fmt: skip
        if not run:
            return None
        bodies = run.bodies()
        self.read_cache.put_run(ledger_id, zip(run.ids, bodies, strict=False))
        self.stats.read_cache_size.set(self.read_cache.size)
        return bodies[0]

    async def read_range(
        self, ledger_id: int, first: int, max_count: int, max_bytes: int, stride: int = 1
    ) -> list[bytes]:
        return await read_range(self, ledger_id, first, max_count, max_bytes, stride)

    def run_reader(self, ledger_id: int) -> RunReader:
        return self.dir_for(ledger_id).read_run

    def last_entry(self, ledger_id: int) -> int:
        stored = self.dir_for(ledger_id).locations.last_entry(ledger_id)
        return max(self.write_cache.last_entry(ledger_id), stored)

    def last_entry_body(self, ledger_id: int) -> bytes | None:
        """Usually from the write cache; otherwise one cold read on the loop (once per ledger
        after a restart, see ``LedgerStorage``)."""
        last = self.last_entry(ledger_id)
        if last < 0:
            return None
        body = self.write_cache.get(ledger_id, last)
        if body is None:
            try:
                run = self.dir_for(ledger_id).read_run(ledger_id, last, 1, 1)
            except FileNotFoundError as exc:
                # its entry log is gone (deleted, a lost disk): the LAC it carried is unknown, and
                # the ledger must still answer, so that the auditor can find what is missing
                log.warning("ledger %d: entry %d is indexed but unreadable: %s", ledger_id, last, exc)
                return None
            body = run.bodies()[0] if run else None
        return body

    def ledger_record(self, ledger_id: int) -> LedgerRecord | None:
        return self.dir_for(ledger_id).ledgers.get(ledger_id)

    async def entry_ids(self, ledger_id: int) -> list[int]:
        """The entries this bookie can serve: in the write cache, or indexed in an entry log that
        is still on disk (an index entry whose log is gone, deleted or lost, names data that is
        not there: the auditor's ledger check must see it missing)."""
        directory = self.dir_for(ledger_id)

        def servable() -> list[int]:
            on_disk = {directory.entry_logger.current_id, *directory.entry_logger.finished_log_ids()}
            return [e for e, log_id in directory.locations.entry_log_ids(ledger_id) if log_id in on_disk]

        stored = await asyncio.to_thread(servable)
        return sorted(set(stored).union(self.write_cache.entry_ids(ledger_id)))


def _failure_seen(task: asyncio.Task[None]) -> None:
    """A failed flush logs its error and callers awaiting it get it, but nothing awaits one an
    add started: without this, asyncio would log it once more as 'never retrieved'."""
    if not task.cancelled():
        task.exception()


async def _submit_all(submissions: list[Coroutine[None, None, None]]) -> None:
    await asyncio.gather(*submissions)
