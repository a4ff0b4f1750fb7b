"""Range reads (ReadEntries, StridePoll) are served by one storage call: what they return equals
the entries read one by one, wherever the entries are (write cache, read-ahead cache, entry logs),
and a cold range costs one entry-log run, not one read-ahead batch after the other."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.storage_helpers import InMemoryHost, add_all, add_op, body, make_bookie, make_config

from bkproto.v1 import bookie_pb2
from bookie.bookie import Bookie
from bookie.errors import BookieError
from bookie.storage.read_cache import ReadCache

HELD = [e for e in range(600) if e % 3 != 2]  # a bookie of a striped ledger, E=3 Qw=2
CASES = [  # first, stride, max count, max bytes
    (0, 1, 1000, 1 << 30),  # stops at entry 2, not held
    (0, 3, 1000, 1 << 30),  # every third: all held, to the end
    (1, 3, 50, 1 << 30),  # stops at the count
    (4, 3, 1000, 3000),  # stops at the byte limit
    (3, 1, 1, 1),  # the first entry whatever the byte limit
]


async def _one_by_one(bookie: Bookie, first: int, stride: int, count: int, max_bytes: int) -> list[bytes]:
    out: list[bytes] = []
    entry_id = first
    while len(out) < count:
        try:
            entry = await bookie.read_entry(5, entry_id)
        except BookieError:
            break
        if out and sum(map(len, out)) + len(entry) > max_bytes:
            break
        out.append(entry)
        entry_id += stride
    return out


async def _check_cases(bookie: Bookie) -> None:
    for first, stride, count, max_bytes in CASES:
        expected = await _one_by_one(bookie, first, stride, count, max_bytes)
        assert expected, "every case starts at an entry held"
        assert await bookie.read_entries(5, first, count, max_bytes, stride=stride) == expected


async def test_range_reads_equal_single_reads_from_caches_and_entry_logs(tmp_path: Path) -> None:
    config = make_config(tmp_path, read_ahead_cache_max_size_mb=1, read_ahead_batch_size=10)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(5, e) for e in HELD[:200]])
        await bookie.storage.checkpoint()  # the first 200 held only in the entry log
        await add_all(bookie, [add_op(5, e) for e in HELD[200:]])  # the rest in the write cache
        await _check_cases(bookie)
        with pytest.raises(BookieError) as refused:
            await bookie.read_entries(5, 2, 10, 1 << 20)
        assert refused.value.status == bookie_pb2.ENOENTRY
        with pytest.raises(BookieError) as refused:
            await bookie.read_entries(6, 0, 10, 1 << 20)
        assert refused.value.status == bookie_pb2.ENOLEDGER


async def test_range_reads_equal_single_reads_in_memory_storage() -> None:
    bookie = InMemoryHost().bookie()
    await bookie.start()
    try:
        await add_all(bookie, [add_op(5, e) for e in HELD])
        await _check_cases(bookie)
    finally:
        await bookie.close()


async def test_a_cold_range_is_one_entry_log_run_that_later_ranges_share(tmp_path: Path) -> None:
    config = make_config(tmp_path, read_ahead_cache_max_size_mb=4, read_ahead_batch_size=10)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(5, e) for e in range(1000)] + [add_op(6, e) for e in HELD])
        await bookie.storage.checkpoint()
        stats = bookie.storage.stats
        assert await bookie.read_entries(5, 0, 1000, 1 << 30) == [body(5, e) for e in range(1000)]
        assert stats.read_cache_misses.get() == 1
        strided = await bookie.read_entries(5, 1, 300, 1 << 30, stride=3)  # read already
        assert strided == [body(5, e) for e in range(1, 900, 3)]
        assert stats.read_cache_misses.get() == 1
        # the two residues of a striped ledger this bookie holds, asked for at once: one run
        first, second = await asyncio.gather(
            bookie.read_entries(6, 0, 100, 1 << 30, stride=3),
            bookie.read_entries(6, 1, 100, 1 << 30, stride=3),
        )
        assert first == [body(6, e) for e in range(0, 300, 3)]
        assert second == [body(6, e) for e in range(1, 300, 3)]
        assert stats.read_cache_misses.get() == 2
        await bookie.storage.delete_ledgers([5, 6])
        assert len(bookie.storage.recent_runs) == 0


def test_a_read_ahead_run_is_cached_as_its_entries_one_by_one() -> None:
    run = [(e, bytes([e]) * 300) for e in range(10)] + [(3, b"again"), (99, bytes(2000))]
    one_by_one, at_once = ReadCache(1000), ReadCache(1000)
    for entry_id, entry in run:
        one_by_one.put(7, entry_id, entry)
    at_once.put_run(7, run)
    assert at_once.size == one_by_one.size <= 1000
    assert [at_once.get(7, e) for e in range(100)] == [one_by_one.get(7, e) for e in range(100)]
