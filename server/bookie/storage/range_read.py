"""Range reads (ReadEntries, StridePoll): many entries per call, paying per call where a single
read pays per entry.

A catch-up reader asks for a thousand entries at a time. Served one entry read after the other,
each costs a coroutine, three cache lookups, two stat updates and, every read-ahead batch, a hop to
a read thread. Here the caches are looked up in one loop without yielding, the stats are updated
once per call, and a cache miss reads in one blocking call on the read pool the entry-log run that
covers the rest of the range (for a strided range, the entries in between too: the bookie holds
the neighbouring residue of a striped ledger as well, and its reader asks for it at the same time).

Runs are kept in :class:`RecentRuns`, not entry by entry in the read-ahead cache: a range read
that misses the caches looks there first, and waits for a run still being read that will hold
its entry rather than reading the same entries again. A run is found once per miss, where the
read-ahead cache costs a put and an eviction per entry, and the range takes what it needs of a run
in one slice (:meth:`EntryRun.take`), not entry by entry.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Protocol

from .config import StorageConfig
from .read_cache import ReadCache
from .read_pool import ReadPool
from .run_read import EntryRun
from .stats import StorageStats
from .write_cache import WriteCache

RunReader = Callable[[int, int, int, int], EntryRun]
_NOTHING_READ = EntryRun(0, [], [], [], [])


class _Run:
    """One entry-log run of a ledger: being read (``entries`` None) or read."""

    __slots__ = ("done", "entries", "first", "ledger_id", "nbytes", "span_end")

    def __init__(self, ledger_id: int, first: int, span_end: int) -> None:
        self.ledger_id = ledger_id
        self.first = first
        self.span_end = span_end  # ids below it are in the run if the ledger holds them
        self.done: asyncio.Future[EntryRun | None] = asyncio.get_running_loop().create_future()
        self.entries: EntryRun | None = None
        self.nbytes = 0


class RecentRuns:
    """The runs range reads have read lately or are reading, the oldest dropped past ``max_bytes``
    (the newest is always kept). Loop only."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._runs: deque[_Run] = deque()

    def __len__(self) -> int:
        return len(self._runs)

    def find(self, ledger_id: int, entry_id: int) -> _Run | None:
        """The newest run that holds ``entry_id``, or that is being read and should."""
        for run in reversed(self._runs):
            if run.ledger_id != ledger_id or not run.first <= entry_id < run.span_end:
                continue
            if run.entries is None or entry_id in run.entries:
                return run
        return None

    def start(self, ledger_id: int, first: int, span_end: int) -> _Run:
        run = _Run(ledger_id, first, span_end)
        self._runs.append(run)
        return run

    def finish(self, run: _Run, entries: EntryRun | None) -> None:
        """The run's entries (None: its read failed, and it is forgotten); its waiters go on."""
        if entries is None:
            self._forget(run)
        else:
            run.entries = entries
            run.nbytes = entries.nbytes
            self.size += run.nbytes
            while self.size > self.max_bytes and len(self._runs) > 1:
                self._forget(self._runs[0])
        if not run.done.done():
            run.done.set_result(entries)

    def _forget(self, run: _Run) -> None:
        try:
            self._runs.remove(run)
        except ValueError:
            return
        self.size -= run.nbytes

    def drop_ledgers(self, ledger_ids: Collection[int]) -> None:
        for run in [r for r in self._runs if r.ledger_id in ledger_ids]:
            self._forget(run)


class RangeSource(Protocol):
    """What a range read needs of ``DbLedgerStorage``."""

    config: StorageConfig
    stats: StorageStats
    write_cache: WriteCache
    read_cache: ReadCache
    read_pool: ReadPool
    recent_runs: RecentRuns

    def run_reader(self, ledger_id: int) -> RunReader:
        """The blocking ``read_run`` of the ledger's directory."""
        ...


async def read_range(
    source: RangeSource, ledger_id: int, first: int, max_count: int, max_bytes: int, stride: int
) -> list[bytes]:
    """``LedgerStorage.read_range`` over the write cache, the read cache and the entry logs."""
    started = time.perf_counter()
    write_cache = source.write_cache
    read_cache = source.read_cache
    stats = source.stats
    out: list[bytes] = []
    size = 0
    cache_hits = ahead_hits = misses = 0
    fetched = _NOTHING_READ  # the entry-log run this call reads from
    missing = False  # stopped at an entry not stored here
    entry_id = first
    try:
        while len(out) < max_count:
            if entry_id in fetched:  # the rest of a run, in one slice as far as it goes
                left = max_count - len(out)
                taken = fetched.take(entry_id, stride, left, size, max_bytes, not out)
                out += taken
                size += sum(map(len, taken))
                entry_id += stride * len(taken)
                if entry_id in fetched:
                    break  # stopped at the byte limit
                continue
            body = write_cache.get(ledger_id, entry_id)
            if body is not None:
                cache_hits += 1
            else:
                body = read_cache.get(ledger_id, entry_id)
                if body is not None:
                    ahead_hits += 1
                else:
                    found = await _recent_run(source.recent_runs, ledger_id, entry_id)
                    if found is not None:
                        ahead_hits += 1
                    else:
                        misses += 1
                        found = await _read_run(
                            source, ledger_id, entry_id, max_count - len(out), max_bytes - size, stride
                        )
                    fetched = found
                    if entry_id not in fetched:
                        missing = True
                        break
                    continue
            if out and size + len(body) > max_bytes:
                break
            out.append(body)
            size += len(body)
            entry_id += stride
    finally:
        if cache_hits:
            stats.write_cache_hits.inc(cache_hits)
        if ahead_hits:
            stats.read_cache_hits.inc(ahead_hits)
        if misses:
            stats.read_cache_misses.inc(misses)
        # the read-entry stat counts entries, as if each had been read on its own in the call's
        # average time; a range that stops at an entry not stored counts that as one failed read
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if out:
            stats.read_entry.observe(elapsed_ms / len(out), count=len(out))
        if missing:
            stats.read_entry.observe(elapsed_ms, success=False)
    return out


async def _recent_run(runs: RecentRuns, ledger_id: int, entry_id: int) -> EntryRun | None:
    """The entries of a recent run holding ``entry_id``, waiting for one being read."""
    run = runs.find(ledger_id, entry_id)
    if run is None:
        return None
    # shielded: a caller that gives up must not cancel the run for the others waiting on it
    entries = run.entries if run.entries is not None else await asyncio.shield(run.done)
    return entries if entries is not None and entry_id in entries else None


async def _read_run(
    source: RangeSource, ledger_id: int, entry_id: int, wanted: int, wanted_bytes: int, stride: int
) -> EntryRun:
    """The entries from ``entry_id`` on, read from the entry logs in one call on the read pool:
    enough to cover ``wanted`` entries ``stride`` apart (at least a read-ahead batch) and about
    ``wanted_bytes`` of them, and no more than a quarter of the recent runs' bound. Others
    reading the same ledger meanwhile wait for it rather than read the same entries again."""
    runs = source.recent_runs
    count = max((wanted - 1) * stride + 1, 1 + source.config.read_ahead_batch_size)
    budget = max(1, min(runs.max_bytes // 4, wanted_bytes * stride))
    run = runs.start(ledger_id, entry_id, entry_id + count)
    entries: EntryRun | None = None
    try:
        entries = await source.read_pool.run(source.run_reader(ledger_id), ledger_id, entry_id, count, budget)
    finally:
        runs.finish(run, entries)
    return entries
