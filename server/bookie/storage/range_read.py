"""Range reads (ReadEntries, StridePoll): many entries per call, paying per call where a single
read pays per entry.

A catch-up reader asks for a thousand entries at a time. Served one entry read after the other,
each costs a coroutine, three cache lookups, two stat updates and, every read-ahead batch, a hop to
a read thread. Here the caches are looked up in one loop without yielding, the stats are updated
once per call, and a cache miss reads in one blocking call on the read pool the entry-log run that
covers the rest of the range (for a strided range, the entries in between too: the bookie holds
the neighbouring residue of a striped ledger as well, and its reader usually asks for it next).
What the run read and the range does not take goes to the read-ahead cache, as BookKeeper's
read-ahead does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from .config import StorageConfig
from .read_cache import ReadCache
from .read_pool import ReadPool
from .stats import StorageStats
from .write_cache import WriteCache

RunReader = Callable[[int, int, int, int], list[tuple[int, bytes]]]


class RangeSource(Protocol):
    """What a range read needs of ``DbLedgerStorage``."""

    config: StorageConfig
    stats: StorageStats
    write_cache: WriteCache
    read_cache: ReadCache
    read_pool: ReadPool

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
    fetched: dict[int, bytes] = {}  # what this call's entry-log runs read
    missing = False  # stopped at an entry not stored here
    entry_id = first
    try:
        while len(out) < max_count:
            body = fetched.get(entry_id)
            if body is None:
                body = write_cache.get(ledger_id, entry_id)
                if body is not None:
                    cache_hits += 1
                else:
                    body = read_cache.get(ledger_id, entry_id)
                    if body is not None:
                        ahead_hits += 1
                    else:
                        misses += 1
                        fetched = await _read_run(
                            source, ledger_id, entry_id, max_count - len(out), max_bytes - size, stride
                        )
                        body = fetched.get(entry_id)
                        if body is None:
                            missing = True
                            break
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


async def _read_run(
    source: RangeSource, ledger_id: int, entry_id: int, wanted: int, wanted_bytes: int, stride: int
) -> dict[int, bytes]:
    """The entries from ``entry_id`` on, read from the entry logs in one call on the read pool:
    enough to cover ``wanted`` entries ``stride`` apart (at least a read-ahead batch) and about
    ``wanted_bytes`` of them, and no more than half the read cache. The entries of the run this
    range does not take go to the read cache: the read-ahead past its end, and the other residues
    of a striped ledger. Those it takes do not: caching them would only push out others."""
    cache = source.read_cache
    count = max((wanted - 1) * stride + 1, 1 + source.config.read_ahead_batch_size)
    budget = max(1, min(cache.max_bytes // 2, wanted_bytes * stride))
    run = await source.read_pool.run(source.run_reader(ledger_id), ledger_id, entry_id, count, budget)
    end = entry_id + wanted * stride
    cache.put_run(ledger_id, [(e, b) for e, b in run if e >= end or (e - entry_id) % stride])
    source.stats.read_cache_size.set(cache.size)
    return dict(run)
