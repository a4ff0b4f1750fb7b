"""Garbage collection of deleted ledgers (BookKeeper's ``GarbageCollectorThread`` with its
``ScanAndCompareGarbageCollector``), every ``gcWaitTime`` or when an operator asks.

One run:

1. snapshot the ledgers this bookie stores;
2. list every ledger in the metadata store;
3. delete locally the snapshot's ledgers the listing lacks (with ``verifyMetadataOnGC``, only
   those whose metadata a direct read also finds absent);
4. delete the entry logs left holding no live ledger.

Why the order of 1 and 2 makes the run safe: a client creates a ledger's metadata before any
bookie sees an entry of it, so a ledger in the snapshot had metadata before the listing began,
and the listing misses it only if it was deleted. Any metadata error ends the run with nothing
deleted. Entry logs still holding some live data keep their garbage until compaction, which this
module does not do yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bookie.storage.ledger_directory import LogUsage
from bookie.storage.stats import LATENCY_BUCKETS_MS

log = logging.getLogger(__name__)


@runtime_checkable
class GcStorage(Protocol):
    """What garbage collection needs of the bookie (``bookie.bookie.Bookie``)."""

    async def local_ledger_ids(self) -> set[int]: ...

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None: ...

    async def reclaim_entry_logs(self) -> LogUsage: ...


@runtime_checkable
class LedgerLister(Protocol):
    """The metadata store's ledgers (``bkmeta.bookie_presence.BookiePresence``; the bookie never
    imports bkmeta). Both raise when the store cannot answer."""

    async def ledger_ids(self) -> set[int]:
        """Every ledger that has metadata."""
        ...

    async def ledger_exists(self, ledger_id: int) -> bool: ...


@dataclass(frozen=True)
class GcSettings:
    wait_time_s: float = 600.0  # gcWaitTime (BookKeeper's code default, 600000 ms)
    verify_metadata: bool = True  # verifyMetadataOnGC (BookKeeper: false; see config.py)


@dataclass(frozen=True)
class GcRun:
    """The outcome of one run."""

    deleted_ledgers: int
    active_ledgers: int
    usage: LogUsage


class GcStats:
    """BookKeeper's ``GarbageCollectorStats`` names."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deleted_ledgers = Counter(
            "bookie_DELETED_LEDGER_COUNT", "Ledgers deleted by garbage collection", registry=registry
        )
        self.reclaimed_bytes = Counter(
            "bookie_RECLAIMED_DELETION_SPACE_BYTES",
            "Entry-log bytes freed by deleting logs of deleted ledgers",
            registry=registry,
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
        self.runtime = Histogram(
            "bookie_gc_THREAD_RUNTIME", "Duration of one garbage collection (ms)",
            buckets=LATENCY_BUCKETS_MS, registry=registry,
        )


class GarbageCollector:
    """Runs collections on the bookie's event loop; ``start()``/``close()`` own its task."""

    def __init__(
        self, storage: GcStorage, lister: LedgerLister, settings: GcSettings, stats: GcStats
    ) -> None:
        if settings.wait_time_s <= 0:
            raise ValueError(f"gc wait time must be > 0, got {settings.wait_time_s}")
        self._storage = storage
        self._lister = lister
        self._settings = settings
        self._stats = stats
        self._wake = asyncio.Event()
        self._forced = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # read by the HTTP admin threads: plain values, replaced whole
        self.running = False
        self.forced_running = False
        self.runs = 0
        self.last_run_ms = 0  # epoch ms of the last finished run
        self.last_error: str | None = None
        self.deleted_ledgers = 0
        self.reclaimed_bytes = 0

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run_forever(), name="bookie-gc")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def trigger(self) -> None:
        """Collect now rather than at the next ``gcWaitTime`` (``PUT /api/v1/bookie/gc``)."""
        self._forced = True
        self._wake.set()

    def trigger_threadsafe(self) -> None:
        if self._loop is None:
            raise RuntimeError("garbage collector not started")
        self._loop.call_soon_threadsafe(self.trigger)

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
        }

    async def _run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.wait_time_s)
            self._wake.clear()
            forced, self._forced = self._forced, False
            self.running, self.forced_running = True, forced
            try:
                await self.collect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed run is retried at the next one
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("garbage collection failed")
            finally:
                self.running = self.forced_running = False

    async def collect(self) -> GcRun | None:
        """One collection; ``None`` when the metadata store could not be listed (nothing
        deleted). Storage errors propagate."""
        started = time.perf_counter()
        local = await self._storage.local_ledger_ids()
        try:
            live = await self._lister.ledger_ids()
        except Exception as exc:  # noqa: BLE001 - no listing, no deletion
            self.last_error = f"cannot list ledgers: {exc}"
            log.warning("garbage collection skipped: cannot list the ledgers in metadata: %s", exc)
            return None
        gone = sorted(local - live)
        if gone and self._settings.verify_metadata:
            gone = await self._confirmed_absent(gone)
        if gone:
            await self._storage.delete_ledgers(gone)
            log.info("garbage collection deleted %d ledgers without metadata: %s%s", len(gone),
                     ", ".join(map(str, gone[:20])), " …" if len(gone) > 20 else "")
        usage = await self._storage.reclaim_entry_logs()
        run = GcRun(len(gone), len(local) - len(gone), usage)
        self._record(run, started)
        return run

    async def _confirmed_absent(self, candidates: list[int]) -> list[int]:
        absent = []
        for ledger_id in candidates:
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

    def _record(self, run: GcRun, started: float) -> None:
        stats = self._stats
        stats.deleted_ledgers.inc(run.deleted_ledgers)
        stats.reclaimed_bytes.inc(run.usage.reclaimed_bytes)
        stats.active_ledgers.set(run.active_ledgers)
        stats.active_logs.set(run.usage.active_logs)
        stats.active_log_bytes.set(run.usage.active_bytes)
        stats.runtime.observe((time.perf_counter() - started) * 1000.0)
        self.runs += 1
        self.last_run_ms = int(time.time() * 1000)
        self.last_error = None
        self.deleted_ledgers += run.deleted_ledgers
        self.reclaimed_bytes += run.usage.reclaimed_bytes
