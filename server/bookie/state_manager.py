"""The bookie's write state, as BookKeeper's BookieStateManager keeps it: writable, or read-only.

A read-only bookie serves reads and fencing, refuses adds with EREADONLY (clients replace it in
their ensembles and leave it out of new ones) and is registered under
``/ledgers/available/readonly/<id>``. Recovery adds are still taken while there is room
(BookKeeper's high-priority writes), so a ledger whose last ensemble holds the bookie can be
recovered.

The bookie is read-only while at least one reason holds, and each reason is set and cleared by
its own source: the disk monitor cannot undo an operator's ``PUT .../state/readonly`` (BookKeeper
had that bug, PR #4640), and an operator cannot make a bookie with a failed journal writable.

With ``readOnlyModeEnabled=false`` the bookie shuts down instead of turning read-only.

With ``persistBookieStatusEnabled=true`` the operator's choice is kept in the ledger directories
(``status_file``) and restored at start, so a bookie an operator drained stays read-only through a
restart. Only that reason is kept: BookKeeper persists every transition, so a bookie that was
read-only for a full disk comes back read-only even with the space freed; here the disk monitor
and the storage health decide those afresh at start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Gauge

from bookie.status_file import BookieStatusFiles
from bookie.storage.health import StorageHealth
from bookie.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_REGISTRATION_RETRY_S = 1.0


class ReadOnlyReason(enum.Enum):
    FORCED = "forceReadOnlyBookie is set"
    MANUAL = "set read-only through the admin API"
    DISK_FULL = "disk usage above diskUsageThreshold"
    JOURNAL_FAILED = "a journal write failed (restart the bookie once the disk is fixed)"
    INDEX_FAILED = "an index write failed (restart the bookie once the disk is fixed)"
    FLUSH_FAILING = "write-cache flushes to the entry logs fail"


_AUTOMATIC = frozenset({
    ReadOnlyReason.DISK_FULL, ReadOnlyReason.JOURNAL_FAILED, ReadOnlyReason.INDEX_FAILED,
    ReadOnlyReason.FLUSH_FAILING,
})
# failures only a restart ends; until then nothing new can be stored, not even recovery adds
_BROKEN = frozenset({ReadOnlyReason.JOURNAL_FAILED, ReadOnlyReason.INDEX_FAILED})


@dataclass(frozen=True)
class ReadOnlySettings:
    """When a bookie turns read-only (BookKeeper's keys and defaults in the comments)."""

    read_only_mode_enabled: bool = True  # readOnlyModeEnabled: false = shut down instead
    force_read_only: bool = False  # forceReadOnlyBookie
    any_disk_full: bool = True  # readOnlyModeOnAnyDiskFullEnabled: false = only when all are
    usage_threshold: float = 0.95  # diskUsageThreshold: a directory above it is full
    warn_threshold: float = 0.90  # diskUsageWarnThreshold: above it, no major compaction
    lwm_threshold: float | None = None  # diskUsageLwmThreshold: writable again below (None: =threshold)
    check_interval_s: float = 10.0  # diskCheckInterval
    persist_status: bool = False  # persistBookieStatusEnabled: an operator's read-only survives restarts
    # minUsableSizeForHighPriorityWrites: recovery adds need this much free space in every
    # directory (BookKeeper's default is 1.2 x logSizeLimit; the config sets it so)
    min_usable_high_priority_bytes: int = 1_288_490_188

    def __post_init__(self) -> None:
        if not 0.0 < self.usage_threshold < 1.0:
            raise ValueError(f"diskUsageThreshold={self.usage_threshold} must be above 0 and below 1")
        if not 0.0 < self.warn_threshold <= self.usage_threshold:
            raise ValueError(
                f"diskUsageWarnThreshold={self.warn_threshold} must be above 0 and at most"
                f" diskUsageThreshold={self.usage_threshold}"
            )
        if self.lwm_threshold is not None and not 0.0 < self.lwm_threshold <= self.usage_threshold:
            raise ValueError(
                f"diskUsageLwmThreshold={self.lwm_threshold} must be above 0 and at most"
                f" diskUsageThreshold={self.usage_threshold}"
            )
        if self.force_read_only and not self.read_only_mode_enabled:
            raise ValueError("forceReadOnlyBookie=true needs readOnlyModeEnabled=true")
        if self.check_interval_s <= 0:
            raise ValueError(f"diskCheckInterval={self.check_interval_s * 1000:g} ms must be positive")

    @property
    def lwm(self) -> float:
        return self.usage_threshold if self.lwm_threshold is None else self.lwm_threshold


@runtime_checkable
class WritableCore(Protocol):
    """What the state manager drives in the bookie core (``bookie.bookie.Bookie``)."""

    def set_write_mode(self, read_only: bool, high_priority_writes: bool = True) -> None: ...

    @property
    def health(self) -> StorageHealth: ...


@runtime_checkable
class ReadOnlyRegistration(Protocol):
    """The bookie's znode, moved between ``available/`` and ``available/readonly/``."""

    async def set_read_only(self, read_only: bool) -> None: ...


class StateRefused(ValueError):
    """An operator's state change the bookie's settings or condition do not allow."""


class BookieStateManager:
    def __init__(
        self,
        core: WritableCore,
        settings: ReadOnlySettings,
        registry: CollectorRegistry,
        shutdown: Callable[[str], None],
        status_files: BookieStatusFiles | None = None,
    ) -> None:
        """``status_files``: where the operator's choice is kept across restarts (None: nowhere)."""
        self._core = core
        self._settings = settings
        self._shutdown = shutdown
        # reason -> what exactly; replaced whole on change, so HTTP threads may read it
        self._reasons: Mapping[ReadOnlyReason, str] = {}
        self._disk_room = True  # room for high-priority writes, as the disk monitor last saw
        self._registration: ReadOnlyRegistration | None = None
        self._registered_read_only: bool | None = None
        self._resync = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.shutting_down = False
        self._status = Gauge(
            "bookie_SERVER_STATUS", "1 while the bookie is writable, 0 while it is read-only",
            registry=registry,
        )
        self._status_files = status_files
        self._persist_lock = threading.Lock()  # HTTP threads persist one at a time
        if settings.force_read_only:
            self._reasons = {ReadOnlyReason.FORCED: "from the configuration"}
        elif status_files is not None:
            self._restore_manual(status_files)
        core.health.add_listener(self._on_storage_health)

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._resync = asyncio.Event()
        self._task = asyncio.create_task(self._sync_registration(), name="bookie-state")
        self._on_storage_health()  # failures seen while storage started (e.g. replay's flush)
        self._apply()

    def attach_registration(self, registration: ReadOnlyRegistration, registered_read_only: bool) -> None:
        """From now on the znode follows the state; it was registered as ``registered_read_only``."""
        self._registration = registration
        self._registered_read_only = registered_read_only
        self._resync.set()

    async def close(self) -> None:
        self.shutting_down = True
        task, self._task = self._task, None
        await cancel_and_wait(task)

    # ---- state --------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return bool(self._reasons)

    @property
    def high_priority_writes(self) -> bool:
        return self._disk_room and _BROKEN.isdisjoint(self._reasons)

    def describe(self) -> dict[str, Any]:
        """``GET /api/v1/bookie/state``: BookKeeper's fields, plus why the bookie is read-only."""
        reasons = self._reasons
        return {
            "running": True,
            "readOnly": bool(reasons),
            "shuttingDown": self.shutting_down,
            "availableForHighPriorityWrites": self.high_priority_writes,
            "readOnlyReasons": [f"{reason.value}: {detail}" for reason, detail in reasons.items()],
        }

    def set_disk_status(self, full: bool, room_for_high_priority: bool, detail: str) -> None:
        """From the disk monitor, after each check that changed something."""
        room_changed = room_for_high_priority != self._disk_room
        self._disk_room = room_for_high_priority
        if not self._set(ReadOnlyReason.DISK_FULL, detail if full else None) and room_changed:
            self._apply()

    def set_manual(self, read_only: bool) -> bool:
        """``PUT /api/v1/bookie/state/readonly``; returns whether the bookie is now read-only
        (it stays so while another reason holds)."""
        if read_only and not self._settings.read_only_mode_enabled:
            raise StateRefused("readOnlyModeEnabled is false: this bookie cannot be made read-only")
        if not read_only and ReadOnlyReason.FORCED in self._reasons:
            raise StateRefused("forceReadOnlyBookie is set: this bookie stays read-only")
        self._set(ReadOnlyReason.MANUAL, "by an operator" if read_only else None)
        return self.read_only

    def set_manual_threadsafe(self, read_only: bool, timeout_s: float = 5.0) -> bool:
        """:meth:`set_manual` from another thread (the HTTP admin server's), then
        :meth:`persist_manual` in that thread."""
        if self._loop is None:
            raise RuntimeError("state manager not started")

        future: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def on_loop() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the caller gave up and was told so: the change must not land later
            try:
                future.set_result(self.set_manual(read_only))
            except Exception as exc:  # noqa: BLE001 - StateRefused above all: the caller reports it
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(on_loop)
        try:
            now_read_only = future.result(timeout_s)
        except TimeoutError:
            if future.cancel():
                raise
            now_read_only = future.result()  # it began meanwhile; set_manual waits on nothing
        self.persist_manual()
        return now_read_only

    def persist_manual(self) -> None:
        """Keep the operator's current choice for the next start, if persistence is on. From any
        thread but the loop's: it fsyncs. The state is read under the same lock as the write, so
        after concurrent changes the last write, which follows the last change, holds it."""
        if self._status_files is None:
            return
        with self._persist_lock:
            self._status_files.write(ReadOnlyReason.MANUAL in self._reasons)

    def _restore_manual(self, status_files: BookieStatusFiles) -> None:
        status = status_files.read()
        if status is None or not status.read_only:
            return
        if not self._settings.read_only_mode_enabled:
            log.warning("ignoring the persisted read-only status: readOnlyModeEnabled is false")
            return
        log.warning("bookie: read-only as an operator left it before the restart (%s)",
                    ", ".join(str(path) for path in status_files.paths))
        self._reasons = {ReadOnlyReason.MANUAL: "by an operator, before the last restart"}

    def _on_storage_health(self) -> None:
        health = self._core.health
        self._set(ReadOnlyReason.JOURNAL_FAILED, health.journal_failure)
        self._set(ReadOnlyReason.INDEX_FAILED, health.index_failure)
        self._set(ReadOnlyReason.FLUSH_FAILING, health.flush_failure)

    def _set(self, reason: ReadOnlyReason, detail: str | None) -> bool:
        """Hold ``reason`` (with ``detail``) or drop it (``None``); returns whether that changed
        anything, and then applies the new state."""
        if self._reasons.get(reason) == detail:
            return False
        reasons = dict(self._reasons)
        if detail is None:
            del reasons[reason]
            log.info("bookie: no longer read-only for: %s", reason.value)
        else:
            if reason not in reasons:
                log.warning("bookie: read-only because %s (%s)", reason.value, detail)
            reasons[reason] = detail
        self._reasons = reasons
        self._apply()
        return True

    def _apply(self) -> None:
        read_only = self.read_only
        self._core.set_write_mode(read_only, self.high_priority_writes)
        self._status.set(0 if read_only else 1)
        automatic = [reason for reason in self._reasons if reason in _AUTOMATIC]
        if automatic and not self._settings.read_only_mode_enabled and not self.shutting_down:
            self.shutting_down = True
            first = automatic[0]
            self._shutdown(f"{first.value} ({self._reasons[first]}) and readOnlyModeEnabled is false")
        self._resync.set()

    # ---- registration -------------------------------------------------------------------------

    async def _sync_registration(self) -> None:
        """Move the znode whenever it disagrees with the state; retried while ZooKeeper fails."""
        while True:
            await self._resync.wait()
            self._resync.clear()
            registration, want = self._registration, self.read_only
            if registration is None or want == self._registered_read_only:
                continue
            try:
                await registration.set_read_only(want)
                self._registered_read_only = want
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: try again shortly
                # half-moved, maybe (both znodes): the move is idempotent, so redo it whatever
                # the state is by then
                self._registered_read_only = None
                log.warning("cannot re-register the bookie as %s: %s; retrying",
                            "read-only" if want else "writable", exc)
                await asyncio.sleep(_REGISTRATION_RETRY_S)
                self._resync.set()
