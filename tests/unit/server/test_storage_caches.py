"""Write-cache backpressure and the bounded read-ahead cache."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from tests.support.storage_helpers import add_all, add_op, body, make_bookie, make_config

from bkproto.v1 import bookie_pb2
from bookie.bookie import Bookie
from bookie.errors import BookieError
from bookie.storage.entry_logger import LOCATION
from bookie.storage.indexes import ENTRY_KEY, EntryLocationIndex
from bookie.storage.kv import KeyValueStorage, MemoryKeyValueStorage
from bookie.storage.read_cache import ReadCache
from bookie.storage.write_cache import WriteCache, WriteCacheHalf


class GatedKeyValueStorage(MemoryKeyValueStorage):
    """In-memory index whose ``sync`` (the end of every flush) waits for a gate: a slow disk."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def sync(self) -> None:
        self.gate.wait()
        super().sync()


async def test_full_write_cache_waits_then_refuses_with_etoomanyrequests(tmp_path: Path) -> None:
    gate = threading.Event()
    gate.set()  # let start-up's checkpoint through

    def factory(path: Path, *, create: bool = True) -> KeyValueStorage:
        return GatedKeyValueStorage(gate)

    config = make_config(tmp_path, write_cache_max_size_mb=1, max_throttle_time_ms=50)
    async with make_bookie(config, kv_factory=factory) as bookie:
        gate.clear()
        try:
            await _fill_until_refused(bookie)
        finally:
            gate.set()  # a failed assertion must not leave the flush thread (and close) stuck
        await add_all(bookie, [add_op(1, 4, payload=PAYLOAD)])
        assert await bookie.read_entry(1, 4) == body(1, 4, payload=PAYLOAD)
        assert [await bookie.read_entry(1, e) for e in range(4)] == [
            body(1, e, payload=PAYLOAD) for e in range(4)
        ]


PAYLOAD = b"w" * (300 * 1024)


async def _fill_until_refused(bookie: Bookie) -> None:
    cache = bookie.storage.write_cache
    await add_all(bookie, [add_op(1, 0, payload=PAYLOAD), add_op(1, 1, payload=PAYLOAD)])
    assert cache.flushing is not None  # half full: swapped, flush stuck on the "disk"
    await add_all(bookie, [add_op(1, 2, payload=PAYLOAD), add_op(1, 3, payload=PAYLOAD)])
    results = await bookie.add_entries([add_op(1, 4, payload=PAYLOAD)])
    assert results[0].status == bookie_pb2.ETOOMANYREQUESTS
    # Each half holds at most its capacity, except that an empty half always admits one batch
    # (an entry larger than a half must still fit): the bound is two halves plus one batch each.
    assert cache.size <= 2 * (cache.half_capacity + 2 * len(PAYLOAD))
    assert cache.get(1, 4) is None
    # refused entries are not stored; accepted ones stay readable while the flush is stuck
    assert await bookie.read_entry(1, 0) == body(1, 0, payload=PAYLOAD)


def test_write_cache_halves_and_reads_see_both() -> None:
    cache = WriteCache(2000)
    cache.put(1, 0, b"a" * 600)
    assert cache.has_room(400) and not cache.has_room(401)
    half = cache.swap()
    cache.put(1, 1, b"b" * 10)
    assert cache.get(1, 0) == b"a" * 600 and cache.get(1, 1) == b"b" * 10
    assert cache.last_entry(1) == 1 and cache.entry_ids(1) == [0, 1]
    assert half.sorted_ledgers() == [(1, {0: b"a" * 600})]
    cache.flush_done()
    assert cache.get(1, 0) is None and cache.size == 10


def test_write_cache_entries_are_invisible_to_the_garbage_collector() -> None:
    # Full collections walk every tracked object; a half holds tens of thousands of entries, and
    # walking them paused the bookie's event loop for 4-27 ms each time a half filled.
    cache = WriteCache(1 << 20)
    for entry_id in range(100):
        cache.put(3, entry_id, bytes(10))
    assert not gc.is_tracked(cache.active.ledgers[3])
    assert not gc.is_tracked(cache.active.last_entries)


def test_read_cache_is_bounded_by_bytes_and_drops_oldest() -> None:
    cache = ReadCache(1000)
    for e in range(10):
        cache.put(1, e, bytes(300))
    assert cache.size <= 1000 and len(cache) == 3
    assert cache.get(1, 9) is not None and cache.get(1, 0) is None
    cache.put(1, 99, bytes(2000))  # larger than the whole cache: not kept
    assert cache.get(1, 99) is None and cache.size <= 1000


async def test_cold_read_reads_ahead_into_the_bounded_read_cache(tmp_path: Path) -> None:
    config = make_config(tmp_path, read_ahead_cache_max_size_mb=1, read_ahead_batch_size=10)
    async with make_bookie(config) as bookie:
        payload = b"r" * 1000
        await add_all(bookie, [add_op(2, e, payload=payload) for e in range(2000)])
        await bookie.storage.checkpoint()
        stats = bookie.storage.stats
        assert await bookie.read_entry(2, 100) == body(2, 100, payload=payload)
        assert stats.read_cache_misses.get() == 1
        for e in range(101, 111):  # the 10 read ahead: hits, no new miss
            assert await bookie.read_entry(2, e) == body(2, e, payload=payload)
        assert stats.read_cache_misses.get() == 1
        assert stats.read_cache_hits.get() == 10
        assert await bookie.read_entry(2, 111) == body(2, 111, payload=payload)
        assert stats.read_cache_misses.get() == 2
        for e in range(0, 2000, 11):
            assert await bookie.read_entry(2, e) == body(2, e, payload=payload)
        assert bookie.storage.read_cache.size <= 1024 * 1024


async def test_read_ahead_skips_the_entries_a_striped_ledger_keeps_elsewhere(tmp_path: Path) -> None:
    """E=3, Qw=2: this bookie holds entries 0, 1, 3, 4, 6, 7, ...; a miss reads ahead the next
    ones it holds, across the gaps, so a strided read (every third id) hits after one miss."""
    config = make_config(tmp_path, read_ahead_cache_max_size_mb=1, read_ahead_batch_size=20)
    held = [e for e in range(300) if e % 3 != 2]
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(4, e) for e in held])
        await bookie.storage.checkpoint()
        stats = bookie.storage.stats
        for e in range(0, 30, 3):  # 0, 3, ..., 27: entry 0 plus the next 20 held reach id 31
            assert await bookie.read_entry(4, e) == body(4, e)
        assert stats.read_cache_misses.get() == 1
        assert stats.read_cache_hits.get() == 9
        strided = await bookie.read_entries(4, 1, 100, 1 << 20, stride=3)
        assert strided == [body(4, e) for e in range(1, 300, 3)]
        with pytest.raises(BookieError):
            await bookie.read_entry(4, 2)  # never held: not read ahead from a neighbour either


def test_read_ahead_lookup_works_for_the_largest_ledger_id() -> None:
    """Read-ahead follows a ledger's keys up to the next ledger's; the largest id has none."""
    index = EntryLocationIndex(MemoryKeyValueStorage())
    last = (1 << 63) - 1
    index.add_batch([ENTRY_KEY.pack(last, e) for e in (0, 2)], [LOCATION.pack(1, 8 * e, 8) for e in (0, 2)])
    assert [e for e, *_ in index.following(last, 0, 10)] == [0, 2]


def test_a_batch_put_in_the_write_cache_equals_its_puts_one_by_one() -> None:
    batch = [add_op(1, 0), add_op(2, 5), add_op(1, 1), add_op(1, 0, payload=b"again"), add_op(2, 3)]
    one_by_one, at_once = WriteCacheHalf(), WriteCacheHalf()
    for op in batch:
        one_by_one.put(op.ledger_id, op.entry_id, op.body)
    at_once.put(1, 7, body(1, 7))
    one_by_one.put(1, 7, body(1, 7))
    at_once.put_all(batch)
    assert at_once == one_by_one
    assert at_once.size == sum(len(b) for entries in at_once.ledgers.values() for b in entries.values())
    assert at_once.last_entries == {1: 7, 2: 5}
