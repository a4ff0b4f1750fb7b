"""The storage's read and journal-creation metrics carry BookKeeper's names and count what they
say after a short write/read load on a real DbLedgerStorage: ``bookie_read_entry`` (every
storage read, a missing entry as a failure), the read pool's queue and task latencies (cold reads
only, see ``bookie.storage.read_pool``), and ``bookie_journal_JOURNAL_CREATION_LATENCY`` (one
per journal file opened, at start and at each rollover)."""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.support.storage_helpers import add_all, add_op, body, make_config

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError
from bookie.on_disk import bookie_on_disk
from bookie.stats import OpLatency
from bookie.storage.read_pool import ReadPool

POOL = "bookkeeper_server_BookieReadThreadPool"
PAYLOAD = b"r" * (64 * 1024)


def count(registry: CollectorRegistry, name: str, success: bool = True) -> float:
    value = registry.get_sample_value(f"{name}_count", {"success": "true" if success else "false"})
    assert value is not None, f"{name} is not exported"
    return value


def quantile(registry: CollectorRegistry, name: str, q: str) -> float:
    value = registry.get_sample_value(name, {"success": "true", "quantile": q})
    assert value is not None, f"{name} has no quantile {q}"
    return value


async def test_reads_and_journal_files_are_counted_under_bookkeeper_names(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    # 1 MiB journal files: the load below rolls over to new files
    config = make_config(tmp_path, journal_max_size_mb=1, read_ahead_batch_size=4, write_cache_max_size_mb=16)
    async with bookie_on_disk(config, registry) as bookie:
        created_at_start = count(registry, "bookie_journal_JOURNAL_CREATION_LATENCY")
        assert created_at_start == 1.0
        for first in range(0, 40, 4):  # 2.5 MiB in groups of 256 KiB
            await add_all(bookie, [add_op(1, e, payload=PAYLOAD) for e in range(first, first + 4)])
        assert count(registry, "bookie_journal_JOURNAL_CREATION_LATENCY") >= 2.0
        assert quantile(registry, "bookie_journal_JOURNAL_CREATION_LATENCY", "1.0") > 0.0

        assert await bookie.read_entry(1, 0) == body(1, 0, payload=PAYLOAD)  # from the write cache
        assert count(registry, f"{POOL}_task_execution") == 0.0  # a cache hit never leaves the loop
        await bookie.storage.checkpoint()  # now only in the entry log
        reads = [await bookie.read_entry(1, e) for e in range(40)]
        assert reads == [body(1, e, payload=PAYLOAD) for e in range(40)]
        assert await bookie.storage.read(1, 99) is None

        assert count(registry, "bookie_read_entry") == 41.0
        assert count(registry, "bookie_read_entry", success=False) == 1.0
        # a cold read brings 1 + 4 entries into the read cache: 40 entries, 8 cold reads, and the
        # read of entry 99 finds nothing on disk
        cold_reads = count(registry, f"{POOL}_task_execution")
        assert cold_reads == 9.0
        assert count(registry, f"{POOL}_task_queued") == cold_reads
        assert quantile(registry, f"{POOL}_task_execution", "1.0") > 0.0
        assert not math.isnan(quantile(registry, f"{POOL}_task_queued", "0.5"))
        assert registry.get_sample_value(f"{POOL}_queue_0") == 0.0
        assert registry.get_sample_value(f"{POOL}_queue", {"thread": "0"}) == 0.0
    text = generate_latest(registry).decode()
    assert f"# TYPE {POOL}_task_queued summary" in text
    assert "# TYPE bookie_read_entry summary" in text


async def _occupy_the_thread(pool: ReadPool) -> tuple[asyncio.Future[bytes], threading.Event]:
    """A read holding the pool's one thread until the returned event is set; it answers b"x"."""
    loop = asyncio.get_running_loop()
    occupied, release = asyncio.Event(), threading.Event()

    def blocked_read() -> bytes:
        loop.call_soon_threadsafe(occupied.set)
        release.wait()
        return b"x"

    read = asyncio.ensure_future(pool.run(blocked_read))
    await occupied.wait()
    return read, release


async def test_the_read_queue_counts_reads_no_thread_has_started() -> None:
    # one read thread (numReadWorkerThreads=1), held by the first read: the second waits
    pool = ReadPool(OpLatency("queued", "q"), OpLatency("execution", "e"), threads=1)
    first, release = await _occupy_the_thread(pool)
    second = asyncio.ensure_future(pool.run(lambda: b"y"))
    await asyncio.sleep(0)
    assert pool.waiting() == 1
    second.cancel()  # given up before a thread took it: no longer waiting
    await asyncio.gather(second, return_exceptions=True)
    assert pool.waiting() == 0
    release.set()
    assert await first == b"x"
    assert pool.waiting() == 0
    pool.close()


async def test_reads_beyond_the_pending_limit_are_refused_with_etoomanyrequests() -> None:
    # maxPendingReadRequestsPerThread=2 on one thread: two reads may wait, a third is refused
    queued, execution = OpLatency("queued", "q"), OpLatency("execution", "e")
    pool = ReadPool(queued, execution, threads=1, max_pending_per_thread=2)
    running, release = await _occupy_the_thread(pool)
    waiting = [asyncio.ensure_future(pool.run(lambda: b"y")) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(BookieError) as refused:
        await pool.run(lambda: b"z")
    assert refused.value.status == bookie_pb2.ETOOMANYREQUESTS
    assert "maxPendingReadRequestsPerThread" in str(refused.value)
    release.set()
    assert await asyncio.gather(running, *waiting) == [b"x", b"y", b"y"]
    pool.close()
