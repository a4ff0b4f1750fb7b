"""The bookie daemon: configuration -> storage core -> gRPC service and add port -> HTTP admin ->
(registration), and the reverse on SIGTERM/SIGINT.

Shutdown order matters for clients: first leave the cluster (unregister), then stop taking new
requests and let running ones finish (add streams answer every batch they started), then close the
core (flush the write cache, checkpoint) so a clean restart has nothing to replay, then HTTP.

When ready the daemon logs one line, ``bookie <id> ready: grpc <host>:<port>, http <port|off>, add
port <port|off>``, which scripts and test fixtures wait for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, ProcessCollector

from bkproto.errors import BKError
from bookie.api import BookieCore
from bookie.config import BookieConfig, ConfigError
from bookie.config_report import server_config
from bookie.disk_monitor import DiskMonitor, DiskStatus
from bookie.gc import GarbageCollector, GcStats, GcStorage, LedgerLister
from bookie.handlers import HandlerLimits
from bookie.http import BookieHttpServer
from bookie.http.cluster import ClusterAccess, client_config_of
from bookie.on_disk import bookie_on_disk
from bookie.security import BookieSecurity
from bookie.service import BookieService
from bookie.state_manager import BookieStateManager, ReadOnlyRegistration, WritableCore
from bookie.stats import RequestStats
from bookie.status_file import BookieStatusFiles

log = logging.getLogger(__name__)


class ManagedCore(BookieCore, Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Registration(Protocol):
    """The bookie's presence in ZooKeeper (``/ledgers/available/<id>`` and its cookie)."""

    async def start(self) -> None:
        """Connect and verify the cookie against the bookie's directories (before storage opens)."""
        ...

    async def register(self, http_port: int | None, add_port: int | None = None) -> None:
        """Announce the serving bookie (ephemeral znode), advertising its bound HTTP port and
        add port."""
        ...

    async def close(self) -> None: ...


CoreFactory = Callable[[BookieConfig, CollectorRegistry], ManagedCore]
RegistrationFactory = Callable[[BookieConfig], Registration]

# Hook for the metadata layer: builds the ZooKeeper registration of a started bookie (config has
# the bound port and ``zk_servers``). Until it is set, only ``zkServers=none`` can run.
registration_factory: RegistrationFactory | None = None


def storage_core(config: BookieConfig, registry: CollectorRegistry) -> ManagedCore:
    """The DbLedgerStorage-backed core (``bookie.bookie.Bookie``)."""
    return bookie_on_disk(config.storage_config(), registry)


class BookieDaemon:
    def __init__(
        self,
        config: BookieConfig,
        core_factory: CoreFactory = storage_core,
        registry: CollectorRegistry | None = None,
        *,
        freeze_startup_heap: bool = False,
    ) -> None:
        if config.zk_servers is not None and registration_factory is None:
            raise ConfigError(
                f"zkServers={config.zk_servers}: ZooKeeper registration is not available in this build;"
                " run with --zk none (zkServers=none) for an unregistered bookie"
            )
        self.config = config
        self.registry = registry or CollectorRegistry()
        self._core_factory = core_factory
        self._freeze_startup_heap = freeze_startup_heap
        self.core: ManagedCore | None = None
        self.service: BookieService | None = None
        self.http: BookieHttpServer | None = None
        self._registration: Registration | None = None
        self.gc: GarbageCollector | None = None
        self.state: BookieStateManager | None = None
        self.disks: DiskMonitor | None = None
        self._stopping = asyncio.Event()
        self.exit_code = 0
        self._not_ready: str | None = "starting"  # GET /api/v1/bookie/is_ready: None once ready

    async def start(self) -> None:
        """Bind, check the cookie, open storage, serve, then register.

        The cookie check needs the bookie id (``host:port``), so the port is bound first, and it
        runs before storage opens its directories: storage must never replay into or checkpoint
        over a replaced disk. The bookie registers only once it serves, so clients never see a
        bookie that cannot answer yet."""
        config = self.config
        self.core = self._core_factory(config, self.registry)
        limits = HandlerLimits(
            max_entry_bytes=config.max_entry_bytes,
            max_adds_per_message=config.limits.max_adds_per_message,
            adds_per_loop_turn=config.limits.adds_per_loop_turn,
            max_long_polls_per_peer=config.limits.max_long_polls_per_peer,
        )
        stats = RequestStats(self.registry)
        security = BookieSecurity(config.security, self.registry)
        self.service = BookieService(
            self.core, stats, config.bind_address, config.port, limits, config.add_port, security,
            config.limits,
        )
        port = self.service.bind()
        self.config = config = dataclasses.replace(config, port=port)
        if registration_factory is not None and config.zk_servers is not None:
            self._registration = registration_factory(config)
            await self._registration.start()  # connects and verifies the cookie
        await self.core.start()  # replays the journal from the last log mark
        self.gc = self._garbage_collector()
        await self._start_state()  # before serving: a full disk must refuse the first add
        await self.service.start()
        add_port = self.service.add_port
        if self.gc is not None:
            await self.gc.start()
        http_port: int | None = None
        if config.http_enabled:
            self.http = BookieHttpServer(self.registry, config.http_address, config.http_port,
                                         last_log_marks=self.core.last_log_marks, gc=self.gc,
                                         state=self.state, readiness=lambda: self._not_ready,
                                         disk_info=self.core.disk_info, security=security,
                                         server_config=lambda: server_config(self.config),
                                         limits=config.limits, limit_stats=stats.limits,
                                         cluster=ClusterAccess(config.zk_servers, client_config_of(config))
                                         if config.zk_servers is not None else None,
                                         bookie_id=config.bookie_id, journal_dirs=config.journal_dirs,
                                         ledger_dirs=config.ledger_dirs)
            http_port = await asyncio.to_thread(self.http.start)
        if self._freeze_startup_heap:
            freeze_startup_heap()  # before registering: no client waits on its collection
        if self._registration is not None:
            await self._register(self._registration, http_port, add_port)
        if self._not_ready == "starting":  # not if a stop came meanwhile
            self._not_ready = None
        log.info(
            "bookie %s ready: grpc %s:%d, http %s, add port %s",
            config.bookie_id,
            config.advertised_address,
            port,
            http_port if http_port is not None else "off",
            add_port if add_port is not None else "off",
        )

    async def _start_state(self) -> None:
        """The read-only state and the disk monitor that feeds it (a storage core only)."""
        core, config = self.core, self.config
        if not isinstance(core, WritableCore):
            return
        status_files = BookieStatusFiles(config.ledger_dirs) if config.read_only.persist_status else None
        self.state = BookieStateManager(core, config.read_only, self.registry, self._fail, status_files)
        await self.state.start()
        self.disks = DiskMonitor([*config.journal_dirs, *config.ledger_dirs], config.read_only,
                                 self.registry, self._on_disk_status)
        await self.disks.start()

    def _on_disk_status(self, status: DiskStatus) -> None:
        assert self.state is not None
        self.state.set_disk_status(status.read_only, status.room_for_high_priority, status.describe())
        if self.gc is not None:
            self.gc.disk_space(almost_full=bool(status.almost_full), full=bool(status.full))

    async def _register(
        self, registration: Registration, http_port: int | None, add_port: int | None
    ) -> None:
        """Register where the state says (``available/`` or ``available/readonly/``), then let
        the state manager move the znode on every change."""
        state = self.state
        if state is None or not isinstance(registration, ReadOnlyRegistration):
            await registration.register(http_port, add_port)
            return
        read_only = state.read_only
        await registration.set_read_only(read_only)  # not registered yet: this only picks where
        await registration.register(http_port, add_port)
        state.attach_registration(registration, read_only)

    def _fail(self, why: str) -> None:
        """Stop with exit code 1 (a disk filled or a journal failed with read-only mode off)."""
        log.error("bookie shutting down: %s", why)
        self.exit_code = 1
        self.request_stop()

    def _garbage_collector(self) -> GarbageCollector | None:
        """Collection compares local ledgers with the metadata store's: it needs both."""
        core, lister = self.core, self._registration
        if not isinstance(core, GcStorage) or not isinstance(lister, LedgerLister):
            log.info("garbage collection off: it needs the storage core and ZooKeeper")
            return None
        return GarbageCollector(core, lister, self.config.gc, GcStats(self.registry))

    def request_stop(self) -> None:
        self._not_ready = "shutting down"
        self._stopping.set()

    async def wait_stopped(self) -> None:
        await self._stopping.wait()

    async def close(self) -> None:
        """Stop collecting, unregister, drain requests, flush and checkpoint storage, stop HTTP.
        Idempotent."""
        self._not_ready = "shutting down"
        if self.disks is not None:
            disks, self.disks = self.disks, None
            await _logged(disks.close(), "stop the disk monitor")
        if self.gc is not None:
            collector, self.gc = self.gc, None
            await _logged(collector.close(), "stop garbage collection")
        if self.state is not None:
            state, self.state = self.state, None
            await _logged(state.close(), "stop the state manager")
        if self._registration is not None:
            registration, self._registration = self._registration, None
            await _logged(registration.close(), "unregister")
        if self.service is not None:
            service, self.service = self.service, None
            await _logged(service.stop(self.config.shutdown_grace_s), "stop gRPC service")
        if self.core is not None:
            core, self.core = self.core, None
            await core.close()  # a failure here is worth a non-zero exit: data may need a replay
        if self.http is not None:
            http, self.http = self.http, None
            await asyncio.to_thread(http.close)


def freeze_startup_heap() -> None:
    """Move everything start-up allocated (modules, classes, functions: tens of thousands of
    tracked objects in a bookie) out of the cyclic garbage collector's sight, as ``gc.freeze`` is
    meant for.

    A bookie's heap is almost all start-up objects, and Python's oldest-generation collection
    scans them all, a stall of every request in flight (figures in docs/performance.md).
    Start-up garbage is collected first so that it is not kept forever."""
    gc.collect()
    gc.freeze()


async def _logged(step: Awaitable[None], what: str) -> None:
    try:
        await step
    except Exception:  # shutdown goes on: the next steps still protect the data
        log.exception("shutdown step %r failed", what)


async def run_daemon(config: BookieConfig, core_factory: CoreFactory = storage_core) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # the bookie's own process: CPU, memory, file descriptors
    daemon = BookieDaemon(config, core_factory, registry, freeze_startup_heap=True)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, daemon.request_stop)
    try:
        try:
            await daemon.start()
        except (OSError, BKError) as exc:
            # e.g. port taken, ZooKeeper unreachable, cookie mismatch: the message says what to do
            log.error("bookie failed to start: %s", exc)
            return 1
        await daemon.wait_stopped()
        log.info("bookie %s stopping", daemon.config.bookie_id)
    finally:
        await daemon.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("bookie %s stopped", daemon.config.bookie_id)
    return daemon.exit_code
