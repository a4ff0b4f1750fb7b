"""Disk usage of the bookie's directories, checked every ``diskCheckInterval`` (BookKeeper's
LedgerDirsMonitor).

A directory is full above ``diskUsageThreshold`` and stays full until it drops below
``diskUsageLwmThreshold``, so a bookie near the line does not flap between read-only and
writable with every entry log garbage collection removes. The bookie is read-only while any
directory is full (``readOnlyModeOnAnyDiskFullEnabled``, the default) or while all are.

Journal directories are watched as well as ledger directories (BookKeeper watches ledger and
index directories only): a journal that hits a full disk fails for good, so it is better to stop
taking adds before it does.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from bookie.state_manager import ReadOnlySettings
from bookie.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DirUsage:
    path: Path
    total_bytes: int
    free_bytes: int  # available to the bookie (not root's reserve)

    @property
    def usage(self) -> float:
        return 1.0 - self.free_bytes / self.total_bytes if self.total_bytes else 1.0


def dir_usage(path: Path) -> DirUsage:
    """From ``statvfs``; a directory that cannot be checked counts as full."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        log.error("cannot check the disk usage of %s: %s", path, exc)
        return DirUsage(path, 0, 0)
    return DirUsage(path, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


@dataclass(frozen=True)
class DiskStatus:
    """Equal to another when all but the exact usages agree: the monitor reports changes only."""

    usages: tuple[DirUsage, ...] = field(compare=False)
    full: frozenset[Path]
    almost_full: frozenset[Path]  # above diskUsageWarnThreshold (full ones included)
    read_only: bool  # the disks say: take no more adds
    room_for_high_priority: bool  # every directory has minUsableSizeForHighPriorityWrites free

    def describe(self) -> str:
        return ", ".join(f"{u.path} {u.usage:.1%} used" for u in self.usages if u.path in self.full)


class DiskChecker:
    """The threshold rules, apart from any disk (so they can be tested with made-up usages)."""

    def __init__(self, settings: ReadOnlySettings) -> None:
        self._s = settings
        self._full: set[Path] = set()

    def check(self, usages: Sequence[DirUsage]) -> DiskStatus:
        s = self._s
        for u in usages:
            if u.usage > s.usage_threshold or (u.path in self._full and u.usage >= s.lwm):
                self._full.add(u.path)
            else:
                self._full.discard(u.path)
        full = frozenset(u.path for u in usages if u.path in self._full)
        almost = frozenset(u.path for u in usages if u.usage > s.warn_threshold) | full
        read_only = bool(full) and (s.any_disk_full or len(full) == len(usages))
        room = all(u.free_bytes >= s.min_usable_high_priority_bytes for u in usages)
        return DiskStatus(tuple(usages), full, almost, read_only, room)


class DiskMonitor:
    """Checks on the event loop (a ``statvfs`` per directory takes microseconds) and tells
    ``listener`` about every status that differs from the previous one."""

    def __init__(
        self,
        dirs: Sequence[Path],
        settings: ReadOnlySettings,
        registry: CollectorRegistry,
        listener: Callable[[DiskStatus], None],
        usage_of: Callable[[Path], DirUsage] = dir_usage,
    ) -> None:
        self._dirs = list(dict.fromkeys(Path(d) for d in dirs))
        self._settings = settings
        self._listener = listener
        self._usage_of = usage_of
        self._checker = DiskChecker(settings)
        self._last: DiskStatus | None = None
        self._task: asyncio.Task[None] | None = None
        self._usage = Gauge(
            "bookie_dir_usage_ratio", "share of the directory's filesystem in use", ["dir"], registry=registry
        )

    @property
    def status(self) -> DiskStatus | None:
        return self._last

    async def start(self) -> None:
        """Check once now (the bookie registers in the right state), then every interval."""
        self.check()
        self._task = asyncio.create_task(self._run(), name="bookie-disk-monitor")

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    def check(self) -> DiskStatus:
        usages = [self._usage_of(d) for d in self._dirs]
        for u in usages:
            self._usage.labels(str(u.path)).set(u.usage)
        status = self._checker.check(usages)
        if status != self._last:
            self._log_change(status)
            self._last = status
            self._listener(status)
        return status

    def _log_change(self, status: DiskStatus) -> None:
        before = self._last
        for u in status.usages:
            was_almost = before is not None and u.path in before.almost_full
            if u.path in status.almost_full and not was_almost and u.path not in status.full:
                log.warning("%s is %.1f%% used, above diskUsageWarnThreshold=%g: major compaction paused",
                            u.path, u.usage * 100, self._settings.warn_threshold)
        if before is not None and before.full and not status.full:
            log.info("no bookie directory is above diskUsageLwmThreshold=%g any more", self._settings.lwm)
        if not status.room_for_high_priority and (before is None or before.room_for_high_priority):
            log.warning("less than minUsableSizeForHighPriorityWrites=%d bytes free: recovery adds refused",
                        self._settings.min_usable_high_priority_bytes)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._settings.check_interval_s)
            try:
                self.check()
            except Exception:  # a listener's bug: keep checking
                log.exception("disk check failed")
