"""Garbage collection of deleted ledgers (BookKeeper's ``GarbageCollectorThread`` with its
``ScanAndCompareGarbageCollector``), every ``gcWaitTime`` or when an operator asks.

One run:

1. snapshot the ledgers this bookie stores;
2. list every ledger in the metadata store;
3. delete locally the snapshot's ledgers the listing lacks (with ``verifyMetadataOnGC``, only
   those whose metadata a direct read also finds absent);
4. delete the entry logs left holding no live ledger;
5. when ``majorCompactionInterval`` (or ``minorCompactionInterval``) has passed since the last one,
   or an operator forces it, compact the logs whose live share is below the major (or minor)
   threshold (see ``bookie.storage.compaction``).

Why the order of 1 and 2 makes the run safe: a client creates a ledger's metadata before any
bookie sees an entry of it, so a ledger in the snapshot had metadata before the listing began,
and the listing misses it only if it was deleted. Any metadata error ends the run with nothing
deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from prometheus_client import CollectorRegistry, Gauge

from bookie.stats import BookKeeperCounter, OpLatency, OpStats
from bookie.storage.compaction import Compacted
from bookie.storage.log_garbage import LogFacts, LogUsage

from .explain import GcState, explain, summary

log = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class GcStorage(Protocol):
    """What garbage collection needs of the bookie (``bookie.bookie.Bookie``)."""

    async def local_ledger_ids(self) -> set[int]: ...

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None: ...

    async def reclaim_entry_logs(self) -> LogUsage: ...

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted: ...

    async def entry_log_facts(self) -> list[LogFacts]: ...


@runtime_checkable
class LedgerLister(Protocol):
    """The metadata store's ledgers (``bkmeta.bookie_presence.BookiePresence``; the bookie never
    imports bkmeta). Both raise when the store cannot answer."""

    async def ledger_ids(self) -> set[int]:
        """Every ledger that has metadata."""
        ...

    async def ledger_exists(self, ledger_id: int) -> bool: ...


@runtime_checkable
class LedgerStates(Protocol):
    """Optionally, a lister that can say whether a ledger is still open (``gcexplain``)."""

    async def ledger_is_open(self, ledger_id: int) -> bool | None: ...


_MAX_OPEN_LOOKUPS = 1000  # metadata reads one gcexplain makes to tell open pinning ledgers


@dataclass(frozen=True)
class GcSettings:
    wait_time_s: float = 600.0  # gcWaitTime (BookKeeper's code default, 600000 ms)
    verify_metadata: bool = True  # verifyMetadataOnGC (BookKeeper: false; see config.py)
    # a compaction kind runs when both its threshold and its interval are > 0 (BookKeeper's rule)
    minor_threshold: float = 0.2  # minorCompactionThreshold
    minor_interval_s: float = 3600.0  # minorCompactionInterval
    major_threshold: float = 0.8  # majorCompactionThreshold
    major_interval_s: float = 86400.0  # majorCompactionInterval
    rate_bytes: int = 1_000_000  # compactionRateByBytes (bytes/s)
    minor_max_time_s: float = -1.0  # minorCompactionMaxTimeMillis; <= 0: no limit
    major_max_time_s: float = -1.0  # majorCompactionMaxTimeMillis; <= 0: no limit
    # isForceGCAllowWhenNoSpace: compact when the disks run short instead of pausing
    force_when_no_space: bool = False

    def __post_init__(self) -> None:
        if self.wait_time_s <= 0:
            raise ValueError(f"gc wait time must be > 0, got {self.wait_time_s}")
        if self.minor_enabled and self.major_enabled and self.minor_threshold > self.major_threshold:
            # BookKeeper's rule (GarbageCollectorThread), checked only when both passes are on
            raise ValueError(
                f"minorCompactionThreshold={self.minor_threshold} is above majorCompactionThreshold="
                f"{self.major_threshold}; the minor pass must take fewer logs than the major one"
            )

    @property
    def minor_enabled(self) -> bool:
        return self.minor_threshold > 0 and self.minor_interval_s > 0

    @property
    def major_enabled(self) -> bool:
        return self.major_threshold > 0 and self.major_interval_s > 0


@dataclass(frozen=True)
class GcRun:
    """The outcome of one run."""

    deleted_ledgers: int
    active_ledgers: int
    usage: LogUsage
    compaction: str | None = None  # "major", "minor" or None
    compacted: Compacted = field(default_factory=Compacted)


class GcStats:
    """BookKeeper's ``GarbageCollectorStats`` names."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deleted_ledgers = BookKeeperCounter(
            "bookie_DELETED_LEDGER_COUNT", "Ledgers deleted by garbage collection", registry
        )
        self.reclaimed_bytes = BookKeeperCounter(
            "bookie_RECLAIMED_DELETION_SPACE_BYTES",
            "Entry-log bytes freed by deleting logs of deleted ledgers",
            registry,
        )
        self.active_ledgers = Gauge(
            "bookie_ACTIVE_LEDGER_COUNT", "Ledgers stored, as of the last collection", registry=registry
        )
        self.active_logs = Gauge(
            "bookie_ACTIVE_ENTRY_LOG_COUNT", "Finished entry logs kept by the last collection",
            registry=registry,
        )
        self.active_log_bytes = Gauge(
            "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES", "Bytes of the finished entry logs kept",
            registry=registry,
        )
        self.reclaimed_compaction_bytes = BookKeeperCounter(
            "bookie_RECLAIMED_COMPACTION_SPACE_BYTES", "Entry-log bytes freed by compaction",
            registry,
        )
        self.minor_compactions = BookKeeperCounter(
            "bookie_MINOR_COMPACTION_COUNT", "Minor compaction passes", registry
        )
        self.major_compactions = BookKeeperCounter(
            "bookie_MAJOR_COMPACTION_COUNT", "Major compaction passes", registry
        )
        self.oldest_log_age = Gauge(
            "bookie_gc_OLDEST_ENTRY_LOG_AGE_SECONDS", "Age of the oldest entry log, at the last collection",
            registry=registry,
        )
        self.reclaimable_bytes = Gauge(
            "bookie_gc_RECLAIMABLE_BYTES",
            "Entry-log bytes no live ledger uses (freed once their logs are deleted or compacted),"
            " at the last collection", registry=registry,
        )
        self.runtime = OpLatency("bookie_gc_THREAD_RUNTIME", "Duration of one garbage collection (ms)")
        OpStats(registry, [self.runtime])


class GarbageCollector:
    """Runs collections on the bookie's event loop; ``start()``/``close()`` own its task."""

    def __init__(
        self, storage: GcStorage, lister: LedgerLister, settings: GcSettings, stats: GcStats
    ) -> None:
        self._storage = storage
        self._lister = lister
        self._settings = settings
        self._stats = stats
        self._wake = asyncio.Event()
        self._forced = False
        self._force_major = self._force_minor = False
        # BookKeeper counts the first intervals from start-up
        self._last_major = self._last_minor = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Set by close(): a run stops between steps, compaction between slices. A run in a
        # storage step is awaited, never cancelled: that would abandon its thread, still running.
        # One talking to ZooKeeper (listing, verifying) is cancelled: no thread is involved.
        self._stop = threading.Event()
        self._in_storage = False
        # read by the HTTP admin threads: plain values, replaced whole
        self.running = False
        self.forced_running = False
        self.runs = 0
        self.last_run_ms = 0  # epoch ms of the last finished run
        self.last_error: str | None = None
        self.deleted_ledgers = 0
        self.reclaimed_bytes = 0
        self.compacting: str | None = None
        self.last_major_ms = self.last_minor_ms = 0
        self.major_compactions = self.minor_compactions = 0
        # compaction paused (major, minor), per source: the disk monitor's cannot end an
        # operator's, nor the other way round; each pair is replaced whole
        self._paused_for_disks = (False, False)
        self._paused_by_operator = (False, False)
        self._short_of_space = False  # with force_when_no_space: every run compacts
        self._operator_lock = threading.Lock()  # HTTP threads update the operator's pair

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run_forever(), name="bookie-gc")

    async def close(self) -> None:
        self._stop.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        if not self.running or not self._in_storage:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def trigger(self, force_major: bool = True, force_minor: bool = True) -> None:
        """Collect now rather than at the next ``gcWaitTime``, compacting too unless told not
        to (``PUT /api/v1/bookie/gc``, whose ``forceMajor``/``forceMinor`` these are)."""
        self._forced = True
        self._force_major |= force_major
        self._force_minor |= force_minor
        self._wake.set()

    def trigger_threadsafe(self, force_major: bool = True, force_minor: bool = True) -> None:
        if self._loop is None:
            raise RuntimeError("garbage collector not started")
        self._loop.call_soon_threadsafe(self.trigger, force_major, force_minor)

    @property
    def major_suspended(self) -> bool:
        return self._paused_for_disks[0] or self._paused_by_operator[0]

    @property
    def minor_suspended(self) -> bool:
        return self._paused_for_disks[1] or self._paused_by_operator[1]

    def disk_space(self, almost_full: bool, full: bool) -> None:
        """The disk monitor's news (on the loop). As BookKeeper does, compaction pauses while the
        disks are nearly full (major) or full (both): it writes the live entries anew before it
        deletes their old log, so it needs room first. Collection itself goes on: deleting ledgers
        only frees space.

        With ``isForceGCAllowWhenNoSpace`` it is the other way round, for clusters where only
        compaction can give the space back: running short forces a collection with compaction at
        once, and every run while short compacts whatever its threshold allows, due or not."""
        if self._settings.force_when_no_space:
            short = almost_full or full
            if short and not self._short_of_space:
                log.warning("disks short of space: forcing garbage collection and compaction"
                            " (isForceGCAllowWhenNoSpace)")
                self.trigger()
            elif self._short_of_space and not short:
                log.info("disk space back: compaction on its own schedule again")
            self._short_of_space = short
            return
        major, minor = almost_full, full
        if (major, minor) != self._paused_for_disks:
            log.info("compaction for full disks: major %s, minor %s",
                     "paused" if major else "on", "paused" if minor else "on")
        self._paused_for_disks = (major, minor)

    def suspend_by_operator(self, major: bool | None = None, minor: bool | None = None) -> None:
        """``PUT /api/v1/bookie/gc/suspend_compaction`` (True) and ``.../resume_compaction``
        (False); ``None`` leaves that kind as it is. From any thread. A compaction under way
        finishes; the next one is skipped while its kind is suspended."""
        with self._operator_lock:
            was = self._paused_by_operator
            now = (was[0] if major is None else major, was[1] if minor is None else minor)
            self._paused_by_operator = now
        if now != was:
            log.info("compaction by an operator: major %s, minor %s",
                     "suspended" if now[0] else "on", "suspended" if now[1] else "on")

    def suspension(self) -> dict[str, str]:
        """``GET /api/v1/bookie/gc/suspend_compaction``, BookKeeper's string answer."""
        return {"isMajorGcSuspended": str(self.major_suspended).lower(),
                "isMinorGcSuspended": str(self.minor_suspended).lower()}

    def details(self) -> dict[str, Any]:
        """``GET /api/v1/bookie/gc_details``."""
        return {
            "gcRunning": self.running,
            "forceGcRunning": self.forced_running,
            "gcCounter": self.runs,
            "lastGcTime": self.last_run_ms,
            "deletedLedgerCounter": self.deleted_ledgers,
            "reclaimedDeletionSpaceBytes": self.reclaimed_bytes,
            "lastError": self.last_error,
            "gcWaitTimeMs": int(self._settings.wait_time_s * 1000),
            # BookKeeper's fields
            "forceCompacting": self.forced_running and self.compacting is not None,
            "majorCompacting": self.compacting == "major",
            "minorCompacting": self.compacting == "minor",
            "lastMajorCompactionTime": self.last_major_ms,
            "lastMinorCompactionTime": self.last_minor_ms,
            "majorCompactionCounter": self.major_compactions,
            "minorCompactionCounter": self.minor_compactions,
            "majorCompactionSuspended": self.major_suspended,
            "minorCompactionSuspended": self.minor_suspended,
        }

    async def _run_forever(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.wait_time_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            forced, self._forced = self._forced, False
            major, minor = self._force_major, self._force_minor
            self._force_major = self._force_minor = False
            if self._short_of_space:
                major = minor = forced = True
            self.running, self.forced_running = True, forced
            try:
                await self.collect(force_major=major, force_minor=minor)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed run is retried at the next one
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("garbage collection failed")
            finally:
                self.running = self.forced_running = False

    async def collect(self, force_major: bool = False, force_minor: bool = False) -> GcRun | None:
        """One collection; ``None`` when the metadata store could not be listed (nothing
        deleted, nothing compacted). Storage errors propagate."""
        started = time.perf_counter()
        local = await self._storage_step(self._storage.local_ledger_ids())
        try:
            live = await self._lister.ledger_ids()
        except Exception as exc:  # noqa: BLE001 - no listing, no deletion
            self.last_error = f"cannot list ledgers: {exc}"
            log.warning("garbage collection skipped: cannot list the ledgers in metadata: %s", exc)
            return None
        gone = sorted(local - live)
        if gone and self._settings.verify_metadata:
            gone = await self._confirmed_absent(gone)
        if self._stop.is_set():
            return None
        if gone:
            await self._storage_step(self._storage.delete_ledgers(gone))
            log.info("garbage collection deleted %d ledgers without metadata: %s%s", len(gone),
                     ", ".join(map(str, gone[:20])), " …" if len(gone) > 20 else "")
        usage = await self._storage_step(self._storage.reclaim_entry_logs())
        self._record_deletions(len(gone), len(local) - len(gone), usage)  # seen before a long compaction
        if self._stop.is_set():
            return None
        kind, compacted = await self._compact(force_major, force_minor)
        oldest, reclaimable = summary(await self._explain(live))
        self._stats.oldest_log_age.set(oldest)
        self._stats.reclaimable_bytes.set(reclaimable)
        self._stats.runtime.observe((time.perf_counter() - started) * 1000.0)
        self.runs += 1
        self.last_run_ms = int(time.time() * 1000)
        self.last_error = None
        return GcRun(len(gone), len(local) - len(gone), usage, kind, compacted)

    async def _compact(self, force_major: bool, force_minor: bool) -> tuple[str | None, Compacted]:
        """The major pass if it is due (or forced), else the minor one if due; none if neither."""
        s = self._settings
        now = time.monotonic()
        major_ok = s.major_enabled and not self.major_suspended
        minor_ok = s.minor_enabled and not self.minor_suspended
        if major_ok and (force_major or now - self._last_major >= s.major_interval_s):
            kind, threshold = "major", s.major_threshold
        elif minor_ok and (force_minor or now - self._last_minor >= s.minor_interval_s):
            kind, threshold = "minor", s.minor_threshold
        else:
            return None, Compacted()
        self.compacting = kind
        max_time_s = s.major_max_time_s if kind == "major" else s.minor_max_time_s
        stop = StopOrDeadline(self._stop, max_time_s) if max_time_s > 0 else self._stop
        try:
            compacted = await self._storage_step(
                self._storage.compact_entry_logs(min(threshold, 1.0), s.rate_bytes, stop)
            )
        finally:
            self.compacting = None
        now_ms = int(time.time() * 1000)
        # a major pass covers a minor one (BookKeeper resets both clocks too)
        self._last_minor = time.monotonic()
        self.last_minor_ms = now_ms
        if kind == "major":
            self._last_major = self._last_minor
            self.last_major_ms = now_ms
            self.major_compactions += 1
            self._stats.major_compactions.inc()
        else:
            self.minor_compactions += 1
            self._stats.minor_compactions.inc()
        self._stats.reclaimed_compaction_bytes.inc(compacted.reclaimed_bytes)
        if compacted.logs:
            log.info("%s compaction rewrote %d entry logs, freeing %d bytes", kind, compacted.logs,
                     compacted.reclaimed_bytes)
        return kind, compacted

    # -- gcexplain --------------------------------------------------------------------------

    def gc_state(self) -> GcState:
        s = self._settings
        now = time.monotonic()
        wait = s.wait_time_s
        return GcState(
            minor_threshold=s.minor_threshold, major_threshold=s.major_threshold,
            minor_enabled=s.minor_enabled, major_enabled=s.major_enabled,
            next_run_in_s=0.0 if self.running else wait,  # a run starts at most gcWaitTime from now
            next_minor_in_s=max(wait, self._last_minor + s.minor_interval_s - now),
            next_major_in_s=max(wait, self._last_major + s.major_interval_s - now),
            minor_suspended_by_operator=self._paused_by_operator[1],
            major_suspended_by_operator=self._paused_by_operator[0],
            minor_paused_for_disk=self._paused_for_disks[1],
            major_paused_for_disk=self._paused_for_disks[0],
            rate_bytes=s.rate_bytes,
        )

    async def _explain(self, in_metadata: set[int] | None, with_open: bool = False) -> list[dict[str, Any]]:
        facts = await self._storage_step(self._storage.entry_log_facts())
        open_ledgers: set[int] = set()
        if with_open and isinstance(self._lister, LedgerStates):
            pinning = sorted({lid for f in facts for lid in f.stored
                              if in_metadata is None or lid in in_metadata})
            for ledger_id in pinning[:_MAX_OPEN_LOOKUPS]:
                with contextlib.suppress(Exception):  # unknown stays "live"
                    if await self._lister.ledger_is_open(ledger_id):
                        open_ledgers.add(ledger_id)
        return explain(facts, in_metadata, self.gc_state(), open_ledgers=open_ledgers)

    async def explain(self) -> list[dict[str, Any]]:
        """``gcexplain``: every entry log, why it is still there (see :mod:`.explain`)."""
        try:
            live: set[int] | None = await self._lister.ledger_ids()
        except Exception as exc:  # noqa: BLE001 - explain what can be explained without it
            log.warning("gcexplain without the metadata listing: %s", exc)
            live = None
        return await self._explain(live, with_open=True)

    def explain_threadsafe(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """:meth:`explain` from another thread (the HTTP admin server's)."""
        if self._loop is None:
            raise RuntimeError("garbage collector not started")
        return asyncio.run_coroutine_threadsafe(self.explain(), self._loop).result(timeout_s)

    async def _storage_step(self, step: Awaitable[T]) -> T:
        self._in_storage = True
        try:
            return await step
        finally:
            self._in_storage = False

    async def _confirmed_absent(self, candidates: list[int]) -> list[int]:
        absent = []
        for ledger_id in candidates:
            if self._stop.is_set():
                return []
            try:
                exists = await self._lister.ledger_exists(ledger_id)
            except Exception as exc:  # noqa: BLE001 - unsure: keep it for the next run
                log.warning(
                    "garbage collection keeps ledger %d: its metadata read failed: %s", ledger_id, exc
                )
                continue
            if exists:
                log.info("garbage collection keeps ledger %d: the listing missed it but it exists", ledger_id)
            else:
                absent.append(ledger_id)
        return absent

    def _record_deletions(self, deleted: int, active: int, usage: LogUsage) -> None:
        stats = self._stats
        stats.deleted_ledgers.inc(deleted)
        stats.reclaimed_bytes.inc(usage.reclaimed_bytes)
        stats.active_ledgers.set(active)
        stats.active_logs.set(usage.active_logs)
        stats.active_log_bytes.set(usage.active_bytes)
        self.deleted_ledgers += deleted
        self.reclaimed_bytes += usage.reclaimed_bytes


class StopOrDeadline(threading.Event):
    """Set when the collector stops or once ``max_time_s`` has passed: a compaction pass under
    ``minor/majorCompactionMaxTimeMillis`` ends between slices at its deadline, as BookKeeper's
    does, with the least used logs (taken first) done."""

    def __init__(self, stop: threading.Event, max_time_s: float) -> None:
        super().__init__()
        self._stop = stop
        self._deadline = time.monotonic() + max_time_s

    def is_set(self) -> bool:
        return self._stop.is_set() or time.monotonic() >= self._deadline

    def wait(self, timeout: float | None = None) -> bool:
        left = self._deadline - time.monotonic()
        self._stop.wait(max(0.0, left if timeout is None else min(timeout, left)))
        return self.is_set()
