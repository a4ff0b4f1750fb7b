"""Garbage collection of deleted ledgers on a real bookie core (real files, RocksDB): what the
metadata store no longer lists is deleted locally, entry logs left with no live ledger are
removed, and everything else stays readable, before and after a restart. The metadata store is
a fake behind the collector's own ``LedgerLister`` interface."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from tests.support.storage_helpers import add_all, add_op, body, make_bookie, make_config

from bkproto.v1 import bookie_pb2
from bookie.bookie import Bookie
from bookie.errors import BookieError
from bookie.gc import GarbageCollector, GcSettings, GcStats
from bookie.storage.compaction import ByteThrottle
from bookie.storage.config import StorageConfig
from bookie.storage.entry_logger import parse_log_name
from bookie.storage.flush_pacer import FlushPacer

PAYLOAD = b"x" * 2000  # ~2 KiB entries: a 64 KiB log holds about 30


class FakeMetadata:
    """The metadata store's ledgers, as the collector sees them."""

    def __init__(self, ledgers: set[int]) -> None:
        self.ledgers = set(ledgers)
        self.listing_fails = False
        self.hidden_from_listing: set[int] = set()  # a listing that misses these (a bad walk)
        self.exists_checks: list[int] = []

    async def ledger_ids(self) -> set[int]:
        if self.listing_fails:
            raise ConnectionError("ZooKeeper connection lost")
        return self.ledgers - self.hidden_from_listing

    async def ledger_exists(self, ledger_id: int) -> bool:
        self.exists_checks.append(ledger_id)
        return ledger_id in self.ledgers


def _config(tmp_path: Path, **overrides: Any) -> StorageConfig:
    settings: dict[str, Any] = {"entry_log_size_limit": 64 * 1024, "ledger_dirs": [tmp_path / "ledgers"]}
    settings.update(overrides)
    return make_config(tmp_path, **settings)


def _collector(
    bookie: Bookie, metadata: FakeMetadata, verify: bool = True, **settings: Any
) -> GarbageCollector:
    chosen: dict[str, Any] = {"wait_time_s": 600.0, "verify_metadata": verify, "rate_bytes": 0, **settings}
    return GarbageCollector(bookie, metadata, GcSettings(**chosen), GcStats(CollectorRegistry()))


async def _write(bookie: Bookie, ledger_id: int, count: int) -> None:
    await add_all(bookie, [add_op(ledger_id, e, e - 1, payload=PAYLOAD) for e in range(count)])
    await bookie.storage.checkpoint()  # into the entry logs, one flush per ledger


def _log_files(config: StorageConfig) -> dict[int, int]:
    """Entry log id -> size, over every ledger dir."""
    found = {}
    for root in config.ledger_dirs:
        for path in (Path(root) / "current").iterdir():
            log_id = parse_log_name(path.name)
            if log_id is not None:
                found[log_id] = path.stat().st_size
    return found


async def _assert_readable(bookie: Bookie, ledger_id: int, count: int) -> None:
    for e in range(count):
        assert await bookie.read_entry(ledger_id, e) == body(ledger_id, e, e - 1, PAYLOAD)


async def _assert_gone(bookie: Bookie, ledger_id: int) -> None:
    with pytest.raises(BookieError) as info:
        await bookie.read_entry(ledger_id, 0)
    assert info.value.status == bookie_pb2.ENOLEDGER
    assert await bookie.storage.entry_ids(ledger_id) == []


async def test_deleted_ledger_goes_its_logs_are_reclaimed_and_live_ledgers_stay(tmp_path: Path) -> None:
    config = _config(tmp_path)
    metadata = FakeMetadata({1, 2})
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 150)  # ~300 KiB: several logs holding ledger 1 only
        await _write(bookie, 2, 100)
        before = _log_files(config)
        metadata.ledgers.discard(1)  # a client deleted ledger 1

        run = await _collector(bookie, metadata).collect()

        assert run is not None and run.deleted_ledgers == 1 and run.active_ledgers == 1
        assert metadata.exists_checks == [1]  # verified before deleting
        after = _log_files(config)
        assert run.usage.deleted_logs == len(before) - len(after) >= 3
        assert run.usage.reclaimed_bytes == sum(before.values()) - sum(after.values()) > 250_000
        await _assert_gone(bookie, 1)
        await _assert_readable(bookie, 2, 100)
        assert await bookie.local_ledger_ids() == {2}
        again = await _collector(bookie, metadata).collect()  # nothing left to do
        assert again is not None and again.deleted_ledgers == 0 and again.usage.deleted_logs == 0

    async with make_bookie(config) as reopened:  # the deletion was durable
        assert await reopened.local_ledger_ids() == {2}
        await _assert_gone(reopened, 1)
        await _assert_readable(reopened, 2, 100)


async def test_nothing_is_deleted_when_the_listing_fails(tmp_path: Path) -> None:
    config = _config(tmp_path)
    metadata = FakeMetadata(set())  # every ledger deleted, but the store cannot be listed
    metadata.listing_fails = True
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 50)
        before = _log_files(config)
        collector = _collector(bookie, metadata)
        assert await collector.collect() is None
        assert "cannot list ledgers" in (collector.details()["lastError"] or "")
        assert _log_files(config) == before
        await _assert_readable(bookie, 1, 50)


async def test_a_ledger_the_listing_missed_is_kept_when_its_metadata_still_exists(tmp_path: Path) -> None:
    config = _config(tmp_path)
    metadata = FakeMetadata({1})
    metadata.hidden_from_listing = {1}
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 50)
        run = await _collector(bookie, metadata, verify=True).collect()
        assert run is not None and run.deleted_ledgers == 0
        await _assert_readable(bookie, 1, 50)
        # without verifyMetadataOnGC the listing is trusted, as in BookKeeper
        run = await _collector(bookie, metadata, verify=False).collect()
        assert run is not None and run.deleted_ledgers == 1
        await _assert_gone(bookie, 1)


async def test_cached_entries_of_a_deleted_ledger_never_reach_the_index(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 2, 10)
        await add_all(bookie, [add_op(1, e, e - 1, payload=PAYLOAD) for e in range(20)])  # cached only
        run = await _collector(bookie, FakeMetadata({2})).collect()
        assert run is not None and run.deleted_ledgers == 1
        await bookie.storage.checkpoint()
        await _assert_gone(bookie, 1)
        directory = bookie.storage.dir_for(1)
        assert directory.locations.entry_ids(1) == []

        # a flush that swapped the entries out before the deletion skips them too
        await add_all(bookie, [add_op(3, e, e - 1, payload=PAYLOAD) for e in range(5)])
        half = bookie.storage.write_cache.swap()
        await bookie.delete_ledgers([3])
        bookie.storage.dir_for(3).flush_ledgers(half.sorted_ledgers(), FlushPacer(0, 0.0))
        bookie.storage.write_cache.flush_done()
        assert bookie.storage.dir_for(3).locations.entry_ids(3) == []
        await _assert_readable(bookie, 2, 10)


async def test_an_add_after_the_deletion_starts_the_ledger_afresh(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 10)
        await bookie.delete_ledgers([1])
        await _write(bookie, 1, 3)  # a writer that had not heard of the deletion (BookKeeper too)
        assert await bookie.local_ledger_ids() == {1}
        await _assert_readable(bookie, 1, 3)


async def test_a_log_a_crash_left_without_its_ledger_map_is_scanned(tmp_path: Path) -> None:
    config = _config(tmp_path, entry_log_size_limit=1024 * 1024)
    bookie = make_bookie(config)
    await bookie.start()
    await _write(bookie, 1, 40)  # in the current log, whose ledger map is written only at its end
    bookie.abandon()
    (log_id,) = _log_files(config)
    assert bookie.storage.dirs[0].entry_logger.read_ledger_map(log_id) is None

    async with make_bookie(config) as reopened:
        logger = reopened.storage.dirs[0].entry_logger
        assert logger.scan_ledger_map(log_id) == {1: 40 * (24 + len(body(1, 0, -1, PAYLOAD)))}
        run = await _collector(reopened, FakeMetadata(set())).collect()
        assert run is not None and run.deleted_ledgers == 1 and run.usage.deleted_logs == 1
        assert log_id not in _log_files(config)


async def _write_interleaved(bookie: Bookie, ledgers: tuple[int, ...], count: int, per_flush: int) -> None:
    """``count`` entries of each ledger, checkpointed every ``per_flush``: every log mixes them."""
    for start in range(0, count, per_flush):
        entries = range(start, start + per_flush)
        ops = [add_op(led, e, e - 1, payload=PAYLOAD) for e in entries for led in ledgers]
        await add_all(bookie, ops)
        await bookie.storage.checkpoint()


@contextlib.asynccontextmanager
async def _half_dead_logs(config: StorageConfig) -> AsyncIterator[tuple[Bookie, GarbageCollector]]:
    """A bookie whose logs hold ledgers 1 and 2 side by side (120 entries each), ledger 1 being
    deleted from the metadata, and a collector for it."""
    metadata = FakeMetadata({1, 2})
    async with make_bookie(config) as bookie:
        await _write_interleaved(bookie, (1, 2), 120, 20)
        metadata.ledgers.discard(1)
        yield bookie, _collector(bookie, metadata)


async def test_major_compaction_rewrites_half_dead_logs_and_keeps_every_live_entry(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with _half_dead_logs(config) as (bookie, collector):
        before = _log_files(config)
        run = await collector.collect(force_minor=True)  # ~50 % live: above the minor threshold
        assert run is not None and run.compaction == "minor" and run.compacted.logs == 0
        assert run.deleted_ledgers == 1 and run.usage.deleted_logs == 0  # no log was all garbage
        assert _log_files(config) == before

        run = await collector.collect(force_major=True)  # below the major threshold (0.8)
        assert run is not None and run.compaction == "major"
        after = _log_files(config)
        assert run.compacted.logs >= len(before) - 2  # all but the current log and the last few
        freed = sum(before.values()) - sum(after.values())
        assert freed >= 0.4 * sum(before.values())
        assert run.compacted.reclaimed_bytes >= freed  # the copies went into logs still counted
        details = collector.details()
        assert details["majorCompactionCounter"] == 1 and details["minorCompactionCounter"] == 1
        await _assert_readable(bookie, 2, 120)
        await _assert_gone(bookie, 1)

    bookie = make_bookie(config)  # a crash right after: the copies and the index were synced
    await bookie.start()
    bookie.abandon()
    async with make_bookie(config) as reopened:
        await _assert_readable(reopened, 2, 120)


async def test_a_nearly_full_disk_pauses_compaction_but_not_deletion(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with _half_dead_logs(config) as (bookie, collector):
        before = _log_files(config)
        collector.disk_space(almost_full=True, full=True)  # full: compaction needs room to copy
        run = await collector.collect(force_major=True, force_minor=True)
        assert run is not None and run.deleted_ledgers == 1 and run.compaction is None
        assert _log_files(config) == before  # every log still holds a live entry of ledger 2
        details = collector.details()
        assert details["majorCompactionSuspended"] and details["minorCompactionSuspended"]
        collector.disk_space(almost_full=True, full=False)  # above the warning share only
        run = await collector.collect(force_major=True, force_minor=True)
        assert run is not None and run.compaction == "minor"
        collector.disk_space(almost_full=False, full=False)
        run = await collector.collect(force_major=True)
        assert run is not None and run.compaction == "major" and run.compacted.logs > 0
        await _assert_readable(bookie, 2, 120)


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


async def test_force_gc_when_no_space_compacts_while_the_disks_are_short(tmp_path: Path) -> None:
    config = _config(tmp_path)
    metadata = FakeMetadata({1, 2})
    async with make_bookie(config) as bookie:
        await _write_interleaved(bookie, (1, 2), 120, 20)
        metadata.ledgers.discard(1)
        # compaction is not due for a day; collections come every 0.2 s
        collector = _collector(bookie, metadata, wait_time_s=0.2, force_when_no_space=True)
        await collector.start()
        try:
            await asyncio.sleep(0.5)
            assert collector.runs >= 1 and collector.major_compactions == 0  # not due, not short
            before = _log_files(config)
            collector.disk_space(almost_full=True, full=True)
            await _until(lambda: collector.major_compactions >= 2)  # forced, then every run while short
            assert not collector.major_suspended and not collector.minor_suspended
            assert sum(_log_files(config).values()) < 0.6 * sum(before.values())
            collector.disk_space(almost_full=False, full=False)
            began = collector.runs + (1 if collector.running else 0)  # one may still be compacting
            await _until(lambda: collector.runs > began and not collector.running)
            settled, runs = collector.major_compactions, collector.runs
            await _until(lambda: collector.runs >= runs + 3)
            assert collector.major_compactions == settled  # back on its daily schedule
        finally:
            await collector.close()
        await _assert_readable(bookie, 2, 120)


async def test_the_disks_cannot_resume_what_an_operator_suspended(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with _half_dead_logs(config) as (bookie, collector):
        collector.suspend_by_operator(major=True)
        collector.disk_space(almost_full=True, full=True)
        collector.disk_space(almost_full=False, full=False)  # space back: the operator's stays
        assert collector.suspension() == {"isMajorGcSuspended": "true", "isMinorGcSuspended": "false"}
        run = await collector.collect(force_major=True, force_minor=True)
        assert run is not None and run.compaction == "minor"
        collector.disk_space(almost_full=True, full=True)
        collector.suspend_by_operator(major=False)  # the operator's resume cannot undo the disks'
        assert collector.major_suspended and collector.minor_suspended
        collector.disk_space(almost_full=False, full=False)
        run = await collector.collect(force_major=True)
        assert run is not None and run.compaction == "major" and run.compacted.logs > 0
        await _assert_readable(bookie, 2, 120)


async def test_compaction_leaves_logs_of_live_ledgers_alone(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write_interleaved(bookie, (1, 2), 60, 20)
        before = _log_files(config)
        run = await _collector(bookie, FakeMetadata({1, 2})).collect(force_major=True)
        assert run is not None and run.compaction == "major" and run.compacted.logs == 0
        assert _log_files(config) == before


def test_byte_throttle_holds_the_average_rate() -> None:
    throttle = ByteThrottle(4_000_000)
    started = time.monotonic()
    for _ in range(4):
        throttle.pause(100_000)  # 400 kB at 4 MB/s: about 0.1 s
    assert 0.09 <= time.monotonic() - started < 1.0
    unlimited = ByteThrottle(0)
    started = time.monotonic()
    unlimited.pause(10**12)
    assert time.monotonic() - started < 0.05


# ---- damaged or half-written logs, and races (each of these once lost data or wedged GC) ----


async def test_a_log_cut_short_before_its_header_neither_wedges_collection_nor_survives_it(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 10)
        stub = Path(config.ledger_dirs[0]) / "current" / "ff.log"  # kill -9 between open and header
        stub.write_bytes(b"PB")
        run = await _collector(bookie, FakeMetadata({1})).collect()
        assert run is not None and run.usage.deleted_logs == 1 and not stub.exists()
        await _assert_readable(bookie, 1, 10)


async def test_a_log_whose_ledger_map_is_damaged_is_scanned_instead_and_kept(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 40)  # ~80 KiB: the first log is finished, with its map
        log_id = min(_log_files(config))
        logger = bookie.storage.dirs[0].entry_logger
        path = logger.directory / f"{log_id:x}.log"
        data = bytearray(path.read_bytes())
        map_offset = int.from_bytes(data[16:24], "big")
        data[map_offset:] = bytes(len(data) - map_offset)  # the map's bytes lost to a power cut
        path.write_bytes(bytes(data))
        assert logger.read_ledger_map(log_id) is None
        run = await _collector(bookie, FakeMetadata({1})).collect()
        assert run is not None and run.usage.deleted_logs == 0 and log_id in _log_files(config)
        await _assert_readable(bookie, 1, 40)


async def test_compaction_keeps_a_log_it_cannot_read_to_the_end(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write_interleaved(bookie, (1, 2), 40, 20)
        log_id = min(_log_files(config))
        _rot_size_field(bookie.storage.dirs[0].entry_logger.directory / f"{log_id:x}.log", 2)
        run = await _collector(bookie, FakeMetadata({1})).collect(force_major=True)
        assert run is not None and run.compaction == "major"
        assert log_id in _log_files(config)  # its later records are still the only copies
        with pytest.raises(BookieError):
            await bookie.read_entry(1, 2)  # the damaged entry itself (its replicas have it)
        for e in (*range(2), *range(3, 40)):
            assert await bookie.read_entry(1, e) == body(1, e, e - 1, PAYLOAD)


def _rot_size_field(path: Path, index: int) -> None:
    """Damage the size field of record ``index`` of an entry log, as bit rot would."""
    with open(path, "r+b") as f:
        offset = 1024
        for _ in range(index):
            f.seek(offset)
            offset += 4 + int.from_bytes(f.read(4), "big")
        f.seek(offset)
        f.write((0xFFFFFFF0).to_bytes(4, "big"))


def _deleted_files_open(under: Path) -> list[str]:
    targets = (str(p.readlink()) for p in Path("/proc/self/fd").iterdir() if p.is_symlink())
    return [t for t in targets if t.endswith("(deleted)") and t.startswith(str(under))]


async def test_a_deleted_log_does_not_stay_open(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 1, 60)
        bookie.storage.read_cache.drop_ledgers([1])
        await _assert_readable(bookie, 1, 60)  # readers opened on ledger 1's logs
        run = await _collector(bookie, FakeMetadata(set())).collect()
        assert run is not None and run.usage.deleted_logs >= 1
        assert _deleted_files_open(tmp_path) == []  # the space is really free


async def test_adds_to_a_ledger_being_deleted_are_refused_then_start_it_afresh(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await _write(bookie, 7, 5)
        directory = bookie.storage.dir_for(7)
        directory.lock.acquire()  # a paced flush holds the directory while the deletion waits
        deleting = asyncio.create_task(bookie.delete_ledgers([7]))
        await asyncio.sleep(0.05)
        during = await bookie.add_entries([add_op(7, 100, -1, payload=PAYLOAD)])
        assert during[0].status == bookie_pb2.EIO and "being deleted" in during[0].message
        directory.lock.release()
        await deleting
        await add_all(bookie, [add_op(7, 0, -1, payload=PAYLOAD)])  # the id used again
        await bookie.storage.checkpoint()
        assert await bookie.storage.entry_ids(7) == [0]
    async with make_bookie(config) as reopened:
        await _assert_readable(reopened, 7, 1)


async def test_closing_stops_a_compaction_and_nothing_touches_the_logs_after(tmp_path: Path) -> None:
    config = _config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    await _write_interleaved(bookie, (1, 2), 60, 5)
    settings = GcSettings(600.0, True, rate_bytes=20_000)  # slow: still compacting at close
    collector = GarbageCollector(bookie, FakeMetadata({1}), settings, GcStats(CollectorRegistry()))
    await collector.start()
    collector.trigger()
    for _ in range(1000):
        if collector.compacting is not None:
            break
        await asyncio.sleep(0.01)
    started = time.monotonic()
    await collector.close()  # waits for the run, which stops at its next slice
    assert time.monotonic() - started < 5 and not collector.running
    await bookie.close()
    files = _log_files(config)
    await asyncio.sleep(0.5)
    assert _log_files(config) == files
    async with make_bookie(config) as reopened:
        await _assert_readable(reopened, 1, 60)


async def test_a_crash_left_log_is_kept_when_its_walk_stops_at_damage_not_at_a_torn_tail(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, entry_log_size_limit=1024 * 1024)
    bookie = make_bookie(config)
    await bookie.start()
    await _write_interleaved(bookie, (1, 2), 10, 10)  # one log, no ledger map: current at the crash
    bookie.abandon()
    (log_id,) = _log_files(config)
    path = Path(config.ledger_dirs[0]) / "current" / f"{log_id:x}.log"
    _rot_size_field(path, 2)  # a record of ledger 1; ledger 2's records follow it
    async with make_bookie(config) as reopened:
        run = await _collector(reopened, FakeMetadata({2})).collect(force_major=True)
        assert run is not None and run.usage.deleted_logs == 0 and run.compacted.logs == 0
        assert log_id in _log_files(config)
        await _assert_readable(reopened, 2, 10)


@pytest.mark.parametrize("tail", [b"\0" * 5000, "cut record"])
async def test_a_torn_tail_after_a_crash_still_ends_the_walk(tmp_path: Path, tail: bytes | str) -> None:
    config = _config(tmp_path, entry_log_size_limit=1024 * 1024)
    bookie = make_bookie(config)
    await bookie.start()
    await _write(bookie, 1, 10)
    bookie.abandon()
    (log_id,) = _log_files(config)
    path = Path(config.ledger_dirs[0]) / "current" / f"{log_id:x}.log"
    if isinstance(tail, str):  # the first bytes of a record whose write the crash cut short
        tail = (2020).to_bytes(4, "big") + (1).to_bytes(8, "big") + (10).to_bytes(8, "big") + b"\1" * 300
    path.write_bytes(path.read_bytes() + tail)
    async with make_bookie(config) as reopened:
        assert reopened.storage.dirs[0].entry_logger.scan_ledger_map(log_id) == {
            1: 10 * (24 + len(body(1, 0, -1, PAYLOAD)))
        }
        run = await _collector(reopened, FakeMetadata(set())).collect()
        assert run is not None and run.usage.deleted_logs == 1


async def test_closing_does_not_wait_for_slow_metadata_reads(tmp_path: Path) -> None:
    class SlowMetadata(FakeMetadata):
        async def ledger_exists(self, ledger_id: int) -> bool:
            await asyncio.sleep(0.5)  # a ZooKeeper that stalls: each read takes long
            return await super().ledger_exists(ledger_id)

    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(led, 0, payload=PAYLOAD) for led in range(1, 21)])
        stats = GcStats(CollectorRegistry())
        collector = GarbageCollector(bookie, SlowMetadata(set()), GcSettings(600.0), stats)
        await collector.start()
        collector.trigger()
        await asyncio.sleep(0.7)  # verifying the 20 candidates one by one
        started = time.monotonic()
        await collector.close()
        assert time.monotonic() - started < 0.5
        assert await bookie.local_ledger_ids() == set(range(1, 21))  # nothing was deleted
