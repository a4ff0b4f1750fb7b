"""Read-only mode: the disk thresholds (BookKeeper's LedgerDirsMonitor rules), and the state
manager driving a real bookie core (real files, RocksDB, journal) from disk status, storage
failures and an operator. The registration is a fake behind the state manager's own interface;
the real one (ZooKeeper) is in tests/integration/test_bookie_read_only.py."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tests.support.memory_zk import READONLY, WRITABLE, bookie_znodes, zookeeper_with_faults
from tests.support.storage_helpers import add_all, add_op, make_bookie, make_config

from bkmeta.registration import BookieRegistration, BookieServiceInfo
from bkproto.v1 import bookie_pb2
from bookie.bookie import Bookie
from bookie.config import ConfigError, load_config
from bookie.disk_monitor import DirUsage, DiskChecker, DiskMonitor, DiskStatus
from bookie.state_manager import BookieStateManager, ReadOnlySettings, StateRefused
from bookie.status_file import BookieStatusFiles
from bookie.storage.journal_file import JournalDirectory
from bookie.storage.ledger_directory import IndexWriteError

GiB = 1024**3
A, B = Path("/a"), Path("/b")
SETTINGS = ReadOnlySettings(usage_threshold=0.9, warn_threshold=0.8, lwm_threshold=0.85,
                            min_usable_high_priority_bytes=GiB)


def used(path: Path, share: float, total: int = 100 * GiB) -> DirUsage:
    return DirUsage(path, total, int(total * (1 - share)))


# ---- thresholds -----------------------------------------------------------------------------


def test_a_directory_is_full_above_the_threshold_until_below_the_low_water_mark() -> None:
    checker = DiskChecker(SETTINGS)
    assert not checker.check([used(A, 0.89)]).read_only
    assert checker.check([used(A, 0.91)]).full == {A}
    still = checker.check([used(A, 0.86)])  # between the marks: still full, no flapping
    assert still.read_only and still.full == {A}
    assert not checker.check([used(A, 0.84)]).read_only
    assert not checker.check([used(A, 0.86)]).read_only  # from below, the full threshold counts


def test_any_full_directory_or_all_of_them() -> None:
    statuses = [used(A, 0.95), used(B, 0.5)]
    assert DiskChecker(SETTINGS).check(statuses).read_only
    all_needed = ReadOnlySettings(usage_threshold=0.9, warn_threshold=0.8, any_disk_full=False)
    assert not DiskChecker(all_needed).check(statuses).read_only
    assert DiskChecker(all_needed).check([used(A, 0.95), used(B, 0.95)]).read_only


def test_warning_share_and_room_for_recovery_adds() -> None:
    status = DiskChecker(SETTINGS).check([used(A, 0.82), used(B, 0.5)])
    assert status.almost_full == {A} and not status.full and status.room_for_high_priority
    small = DiskChecker(SETTINGS).check([used(A, 0.95, total=10 * GiB)])  # 0.5 GiB free
    assert small.read_only and not small.room_for_high_priority
    assert "/a 95.0% used" in small.describe()


def test_an_unreadable_directory_counts_as_full() -> None:
    assert DiskChecker(SETTINGS).check([DirUsage(A, 0, 0)]).read_only


async def test_the_monitor_reports_changes_only_and_exports_usage() -> None:
    shares = {A: 0.5}
    seen: list[DiskStatus] = []
    registry = CollectorRegistry()
    monitor = DiskMonitor([A, A], SETTINGS, registry, seen.append, lambda p: used(p, shares[p]))
    await monitor.start()
    try:
        monitor.check()
        shares[A] = 0.6
        monitor.check()
        assert len(seen) == 1 and not seen[0].read_only  # same status: told once
        assert registry.get_sample_value("bookie_dir_usage_ratio", {"dir": "/a"}) == pytest.approx(0.6)
        shares[A] = 0.95
        assert monitor.check().read_only and len(seen) == 2 and seen[-1].read_only
    finally:
        await monitor.close()


def test_settings_are_checked_and_read_from_bookkeeper_keys(tmp_path: Path) -> None:
    defaults = load_config(None, {}, {}).read_only
    assert (defaults.usage_threshold, defaults.warn_threshold, defaults.lwm) == (0.95, 0.90, 0.95)
    assert defaults.read_only_mode_enabled and defaults.any_disk_full and not defaults.force_read_only
    assert defaults.check_interval_s == 10.0
    assert defaults.min_usable_high_priority_bytes == int(1.2 * GiB)  # 1.2 x logSizeLimit
    assert load_config(None, {}, {}).storage_config().entry_log_reserve_bytes == int(1.2 * GiB)
    no_reserve = load_config(None, {"BK_minUsableSizeForEntryLogCreation": "0"})
    assert no_reserve.storage_config().entry_log_reserve_bytes == 0
    config = load_config(None, {
        "BK_diskUsageThreshold": "0.8", "BK_diskUsageLwmThreshold": "0.7", "BK_diskCheckInterval": "500",
        "BK_logSizeLimit": str(64 * 1024 * 1024), "BK_readOnlyModeOnAnyDiskFullEnabled": "false",
    }).read_only
    assert (config.usage_threshold, config.warn_threshold, config.lwm) == (0.8, 0.8, 0.7)
    assert config.check_interval_s == 0.5 and not config.any_disk_full
    assert config.min_usable_high_priority_bytes == int(1.2 * 64 * 1024 * 1024)
    for env, message in [
        ({"BK_diskUsageThreshold": "1"}, "diskUsageThreshold=1.0 must be above 0 and below 1"),
        ({"BK_diskUsageWarnThreshold": "0.99"}, "diskUsageWarnThreshold=0.99 must be above 0 and at most"),
        ({"BK_diskUsageLwmThreshold": "0.96"}, "diskUsageLwmThreshold=0.96 must be above 0 and at most"),
        ({"BK_forceReadOnlyBookie": "true", "BK_readOnlyModeEnabled": "false"}, "needs readOnlyModeEnabled"),
        ({"BK_diskCheckInterval": "1"}, "diskCheckInterval: must be >= 10"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(None, env)


# ---- the state manager over a real bookie core ------------------------------------------------


class FakeRegistration:
    """Where the bookie's znode is; fails the next ``failures`` moves (ZooKeeper trouble)."""

    def __init__(self) -> None:
        self.read_only = False
        self.moves: list[bool] = []
        self.failures = 0
        self.moved = asyncio.Event()

    async def set_read_only(self, read_only: bool) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("ZooKeeper is away")
        self.read_only = read_only
        self.moves.append(read_only)
        self.moved.set()


class Harness:
    def __init__(
        self, bookie: Bookie, settings: ReadOnlySettings = SETTINGS, files: BookieStatusFiles | None = None
    ) -> None:
        self.bookie = bookie
        self.shutdowns: list[str] = []
        self.registry = CollectorRegistry()
        self.state = BookieStateManager(bookie, settings, self.registry, self.shutdowns.append, files)
        self.registration = FakeRegistration()

    async def __aenter__(self) -> Harness:
        await self.state.start()
        self.state.attach_registration(self.registration, False)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.state.close()

    async def registered(self, read_only: bool) -> None:
        async with asyncio.timeout(5):
            while self.registration.read_only != read_only:
                self.registration.moved.clear()
                await self.registration.moved.wait()

    async def add_status(self, ledger_id: int, entry_id: int, recovery: bool = False) -> int:
        return (await self.bookie.add_entries([add_op(ledger_id, entry_id, recovery=recovery)]))[0].status

    @property
    def server_status(self) -> float | None:
        return self.registry.get_sample_value("bookie_SERVER_STATUS")


@pytest.fixture
async def bookie(tmp_path: Path) -> AsyncIterator[Bookie]:
    async with make_bookie(make_config(tmp_path)) as b:
        yield b


async def test_a_full_disk_makes_the_bookie_read_only_until_it_is_writable_again(bookie: Bookie) -> None:
    async with Harness(bookie) as h:
        assert h.server_status == 1.0 and not bookie.read_only
        h.state.set_disk_status(True, True, "/data 96% used")
        await h.registered(True)
        assert bookie.read_only and h.server_status == 0.0
        assert await h.add_status(1, 0) == bookie_pb2.EREADONLY
        assert await h.add_status(1, 0, recovery=True) == bookie_pb2.EOK  # room: high priority ok
        h.state.set_disk_status(True, False, "/data 99% used")
        assert await h.add_status(1, 1, recovery=True) == bookie_pb2.EREADONLY
        assert not h.state.describe()["availableForHighPriorityWrites"]
        h.state.set_disk_status(False, True, "")
        await h.registered(False)
        assert await h.add_status(1, 1) == bookie_pb2.EOK
        assert h.registration.moves == [True, False]


async def test_an_operators_read_only_outlasts_the_disks_and_forced_is_for_good(tmp_path: Path) -> None:
    async with make_bookie(make_config(tmp_path)) as bookie, Harness(bookie) as h:
        assert h.state.set_manual(True)
        await h.registered(True)
        h.state.set_disk_status(True, True, "/data full")
        h.state.set_disk_status(False, True, "")
        assert bookie.read_only  # the disk monitor cannot undo the operator
        assert not h.state.set_manual(False)
        await h.registered(False)
        assert h.registration.moves == [True, False]
    forced = ReadOnlySettings(force_read_only=True)
    async with make_bookie(make_config(tmp_path / "forced")) as bookie, Harness(bookie, forced) as h:
        assert bookie.read_only and h.state.describe()["readOnlyReasons"] == [
            "forceReadOnlyBookie is set: from the configuration"
        ]
        with pytest.raises(StateRefused, match="forceReadOnlyBookie is set"):
            h.state.set_manual(False)


async def test_a_failed_journal_makes_the_bookie_read_only_for_good(bookie: Bookie) -> None:
    async with Harness(bookie) as h:
        await add_all(bookie, [add_op(2, 0)])

        def no_space(data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        bookie.storage.journals[0]._write = no_space  # type: ignore[method-assign]
        assert await h.add_status(2, 1) == bookie_pb2.EIO
        await h.registered(True)
        state = h.state.describe()
        assert state["readOnly"] and not state["availableForHighPriorityWrites"]
        assert "No space left on device" in state["readOnlyReasons"][0]
        assert await h.add_status(3, 0, recovery=True) == bookie_pb2.EREADONLY  # nothing can be journaled
        assert h.state.set_manual(False) and bookie.read_only  # an operator cannot undo it
        assert await bookie.read_entry(2, 0)  # reads go on


async def test_failing_flushes_make_the_bookie_read_only_until_one_succeeds(
    bookie: Bookie, caplog: pytest.LogCaptureFixture
) -> None:
    async with Harness(bookie) as h:
        await add_all(bookie, [add_op(4, 0)])
        directory = bookie.storage.dirs[0]
        real_flush = directory.flush_ledgers

        def no_space(*args: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        directory.flush_ledgers = no_space  # type: ignore[method-assign]
        with pytest.raises(OSError):
            await bookie.storage.checkpoint()
        await h.registered(True)
        assert "write-cache flushes" in h.state.describe()["readOnlyReasons"][0]
        # A full disk is said in one line: a traceback in the log reads as a crash.
        failures = [r for r in caplog.records if r.getMessage().startswith("write-cache flush failed")]
        assert failures and all(r.exc_info is None for r in failures)
        directory.flush_ledgers = real_flush  # type: ignore[method-assign]
        await bookie.storage.checkpoint()  # e.g. garbage collection freed space
        await h.registered(False)
        assert await bookie.read_entry(4, 0) and await h.add_status(4, 1) == bookie_pb2.EOK


async def test_a_failed_index_write_stops_flushes_until_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, write_cache_max_size_mb=1)
    async with make_bookie(config) as bookie, Harness(bookie) as h:
        try:
            await add_all(bookie, [add_op(6, 0)])
            directory = bookie.storage.dirs[0]

            def rocksdb_refuses() -> None:
                raise RuntimeError("IO error: Writer has previous error.")

            directory.locations.sync = rocksdb_refuses  # type: ignore[method-assign]
            with pytest.raises(IndexWriteError):
                await bookie.storage.checkpoint()
            await h.registered(True)
            assert "Writer has previous error" in h.state.describe()["readOnlyReasons"][0]
            assert not h.state.high_priority_writes
            # Said in one line: a traceback in the log reads as a crash (pybk verify counts it).
            failures = [r for r in caplog.records if r.getMessage().startswith("write-cache flush failed")]
            assert failures and all(r.exc_info is None for r in failures)
            assert "Writer has previous error" in failures[0].getMessage()
            log_end = directory.entry_logger.position().offset
            # no more flushes, so no more copies in the entry log; a full cache is an EIO
            big = [add_op(6, e, recovery=True, payload=bytes(64 * 1024)) for e in range(1, 40)]
            bookie.set_write_mode(read_only=False)  # as if the state said so: the storage decides
            statuses = {r.status for r in await bookie.add_entries(big)}
            assert bookie_pb2.EIO in statuses
            assert directory.entry_logger.position().offset == log_end
            assert await bookie.read_entry(6, 0) == add_op(6, 0).body  # still served from the cache
        finally:
            bookie.abandon()  # a crash, as a restart after the failure would be
    async with make_bookie(config) as restarted:  # the journal puts entry 0 back, indexed this time
        assert await restarted.read_entry(6, 0) == add_op(6, 0).body


async def test_a_bookie_starts_read_only_on_a_disk_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No room for a new entry log (the replay's checkpoint fails) nor for a new journal file: the
    bookie still starts, read-only, and serves what it has (the journal keeps the rest)."""
    config = make_config(tmp_path)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(7, e) for e in range(5)])
        bookie.abandon()  # unflushed: a restart replays them

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(JournalDirectory, "create", no_space)
    full = make_config(tmp_path, min_usable_for_entry_log_bytes=1 << 62)
    async with make_bookie(full) as bookie, Harness(bookie) as h:
        try:
            await h.registered(True)
            reasons = " | ".join(h.state.describe()["readOnlyReasons"])
            assert "a journal write failed" in reasons and "write-cache flushes" in reasons
            for e in range(5):
                assert await bookie.read_entry(7, e) == add_op(7, e).body
            assert await h.add_status(7, 5, recovery=True) == bookie_pb2.EREADONLY
        finally:
            bookie.abandon()  # closing would flush, and fail as the start's checkpoint did


async def test_read_only_mode_off_shuts_the_bookie_down_instead(bookie: Bookie) -> None:
    strict = ReadOnlySettings(read_only_mode_enabled=False)
    async with Harness(bookie, strict) as h:
        with pytest.raises(StateRefused, match="readOnlyModeEnabled is false"):
            h.state.set_manual(True)
        assert not bookie.read_only and not h.shutdowns
        h.state.set_disk_status(True, True, "/data 96% used")
        h.state.set_disk_status(True, True, "/data 97% used")
        assert h.shutdowns == [  # once
            "disk usage above diskUsageThreshold (/data 96% used) and readOnlyModeEnabled is false"
        ]
        assert bookie.read_only  # refuses adds until it is down


async def test_the_registration_is_retried_until_zookeeper_takes_it(bookie: Bookie) -> None:
    async with Harness(bookie) as h:
        h.registration.failures = 2
        h.state.set_manual(True)
        await h.registered(True)  # after two failed moves, about a second apart
        assert h.registration.moves == [True]


async def test_a_half_done_move_is_redone_even_if_the_state_flipped_back(bookie: Bookie) -> None:
    """Going writable, the old read-only znode could not be deleted; before the retry the bookie
    turned read-only again. It must not stay in available/ too."""
    server, faults = zookeeper_with_faults()
    registration = BookieRegistration(server.session(), BookieServiceInfo.for_address("h", 1))
    await registration.register()
    h = Harness(bookie)
    await h.state.start()
    h.state.attach_registration(registration, False)
    try:
        h.state.set_manual(True)
        await _until(lambda: bookie_znodes(server) == {READONLY})
        faults.fail_next["delete"] = 1
        h.state.set_manual(False)  # creates available/h:1, fails to delete the read-only one
        await _until(lambda: WRITABLE in bookie_znodes(server))
        h.state.set_manual(True)  # flips back before the retry
        await _until(lambda: bookie_znodes(server) == {READONLY})
        assert registration.read_only
    finally:
        await h.state.close()
        await registration.close()


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while True:  # the in-memory ZooKeeper's nodes change inside the state manager's task
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_an_admin_change_that_timed_out_does_not_land_later(bookie: Bookie) -> None:
    async with Harness(bookie) as h:
        loop = asyncio.get_running_loop()
        started = threading.Event()

        def operator() -> bool:  # the HTTP thread's call, with a short timeout
            started.set()
            return h.state.set_manual_threadsafe(True, 0.2)

        change = loop.run_in_executor(None, operator)
        started.wait(5)
        time.sleep(0.6)  # noqa: ASYNC251 - the event loop is busy past the caller's timeout
        with pytest.raises(TimeoutError):
            await change
        await asyncio.sleep(0.05)
        assert not bookie.read_only  # the caller was told to retry, and nothing happened
        assert await loop.run_in_executor(None, h.state.set_manual_threadsafe, True, 5.0)
        assert bookie.read_only


async def test_an_operators_read_only_is_kept_across_restarts_when_persisted(tmp_path: Path) -> None:
    config = make_config(tmp_path, ledger_dirs=[tmp_path / "l0", tmp_path / "l1"])
    files = BookieStatusFiles(config.ledger_dirs)
    loop = asyncio.get_running_loop()
    async with make_bookie(config) as bookie, Harness(bookie, SETTINGS, files) as h:
        assert files.read() is None  # nothing chosen yet, nothing written
        assert await loop.run_in_executor(None, h.state.set_manual_threadsafe, True, 5.0)
        assert [path.read_text().split(",")[:2] for path in files.paths] == [["1", "READ_ONLY"]] * 2
    async with make_bookie(config) as bookie, Harness(bookie, SETTINGS, files) as h:  # a restart
        await h.registered(True)
        assert bookie.read_only and h.state.describe()["readOnlyReasons"] == [
            "set read-only through the admin API: by an operator, before the last restart"
        ]
        assert not await loop.run_in_executor(None, h.state.set_manual_threadsafe, False, 5.0)
    async with make_bookie(config) as bookie, Harness(bookie, SETTINGS, files) as h:
        assert not bookie.read_only and h.registration.moves == []
        h.state.set_disk_status(True, True, "/data full")  # automatic reasons are not kept
        await h.registered(True)
    status = files.read()
    assert status is not None and not status.read_only


async def test_a_persisted_read_only_is_ignored_without_persistence_or_read_only_mode(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    files = BookieStatusFiles(config.ledger_dirs)
    files.write(True)
    loop = asyncio.get_running_loop()
    async with make_bookie(config) as bookie, Harness(bookie) as h:  # persistBookieStatusEnabled=false
        assert not bookie.read_only
        assert await loop.run_in_executor(None, h.state.set_manual_threadsafe, True, 5.0)
        assert not await loop.run_in_executor(None, h.state.set_manual_threadsafe, False, 5.0)
    status = files.read()
    assert status is not None and status.read_only  # not rewritten: persistence is off
    no_read_only = ReadOnlySettings(read_only_mode_enabled=False)
    async with make_bookie(config) as bookie, Harness(bookie, no_read_only, files):
        assert not bookie.read_only


class PreemptedFirst:
    """A lock whose first taker is preempted just before it gets it: the race of two HTTP threads
    persisting at once, made certain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first = True

    def __enter__(self) -> None:
        if self._first:
            self._first = False
            time.sleep(0.3)
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


async def test_concurrent_admin_changes_persist_the_last_one(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    files = BookieStatusFiles(config.ledger_dirs)
    loop = asyncio.get_running_loop()
    async with make_bookie(config) as bookie, Harness(bookie, SETTINGS, files) as h:
        h.state._persist_lock = PreemptedFirst()  # type: ignore[assignment]
        drain = loop.run_in_executor(None, h.state.set_manual_threadsafe, True, 5.0)
        await asyncio.sleep(0.1)  # applied; its thread is about to persist
        assert not await loop.run_in_executor(None, h.state.set_manual_threadsafe, False, 5.0)
        await drain
        status = files.read()
        assert not bookie.read_only and status is not None and not status.read_only
