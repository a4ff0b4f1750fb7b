"""Flush pacing: a flush spread over its budget, and back to the GIL floor once hurried."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tests.support.storage_helpers import add_all, add_op, make_config

from bookie.on_disk import bookie_on_disk
from bookie.storage.flush_pacer import FlushPacer
from bookie.storage.indexes import LedgerRecord
from bookie.storage.kv import MemoryKeyValueStorage
from bookie.storage.ledger_directory import LedgerDirectory


def _flush(pacer: FlushPacer, slices: int, after_slice: int = -1) -> float:
    """Run ``slices`` empty slices of the pacer's work; return the seconds it took."""
    began = time.perf_counter()
    for i in range(1, slices + 1):
        pacer.pause(time.perf_counter(), i * pacer.total_work / slices)
        if i == after_slice:
            pacer.hurry()
    return time.perf_counter() - began


def test_paced_flush_is_spread_over_its_budget() -> None:
    assert _flush(FlushPacer(1000, 0.4), 10) >= 0.35


def test_unpaced_or_hurried_flush_does_not_wait_for_the_schedule() -> None:
    assert _flush(FlushPacer(1000, 0.0), 10) < 0.2
    assert _flush(FlushPacer(1000, 30.0), 10, after_slice=1) < 5.0  # one slice on schedule


def test_a_flush_behind_the_active_half_keeps_to_the_gil_floor() -> None:
    """After a quiet spell the schedule is long (the half took long to fill) while a burst fills
    the active half fast: the flush keeps to the schedule only while it has done more of its
    work than the active half has filled of its hurry mark."""
    assert _flush(FlushPacer(1000, 0.5, lambda: 0.9), 10) < 0.2  # never ahead: floor throughout
    assert _flush(FlushPacer(1000, 0.5, lambda: 0.2), 10) >= 0.4  # ahead from its third slice on


def test_hurry_cuts_short_a_pause_under_way() -> None:
    """A small half that filled slowly gets a long schedule; a burst must not wait it out."""
    pacer = FlushPacer(1000, 120.0)
    threading.Timer(0.2, pacer.hurry).start()
    assert _flush(pacer, 10) < 2.0


def test_indexing_is_part_of_the_schedule(tmp_path: Path) -> None:
    """The RocksDB writes after the appends are paced too, not crammed in at the GIL floor at
    the end of every flush: a whole half's appends and indexing make the whole schedule, and the
    indexing alone takes its share of the budget."""
    directory = LedgerDirectory(tmp_path, 1 << 30, lambda path, create=True: MemoryKeyValueStorage())
    entries = {e: bytes(100) for e in range(2000)}
    directory.ledgers.put(1, LedgerRecord(b"key"))
    pacer = FlushPacer(100 * 2000, 0.5)
    indexing = []
    add_batch = directory.locations.add_batch

    def timed_add_batch(keys: list[bytes], locations: list[bytes]) -> None:
        indexing.append(time.perf_counter())
        add_batch(keys, locations)

    directory.locations.add_batch = timed_add_batch  # type: ignore[method-assign]
    began = time.perf_counter()
    assert directory.flush_ledgers([(1, entries)], pacer) == pytest.approx(pacer.total_work)
    assert time.perf_counter() - began >= 0.45
    assert indexing[-1] - indexing[0] >= 0.06  # about a fifth of the budget, not a burst
    directory.close()


async def test_a_half_filling_up_swaps_without_counting_a_throttled_add(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    config = make_config(tmp_path, write_cache_max_size_mb=1)
    memory_kv = lambda path, create=True: MemoryKeyValueStorage()  # noqa: E731
    async with bookie_on_disk(config, registry, kv_factory=memory_kv) as bookie:
        payload = b"p" * (100 * 1024)
        for entry_id in range(12):  # 1.2 MB into 0.5 MB halves: two swaps, adds never wait
            await add_all(bookie, [add_op(1, entry_id, payload=payload)])
            await bookie.storage._wait_flush()
        assert registry.get_sample_value("bookie_throttled_write_requests") == 0.0
        assert bookie.storage.write_cache.active.size < bookie.storage.write_cache.half_capacity
