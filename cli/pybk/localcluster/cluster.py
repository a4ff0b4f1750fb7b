"""The local cluster's life: start ZooKeeper and the bookies, check them, watch them, stop them.

Start order is ZooKeeper → cluster metadata (idempotent) → bookies → wait until every bookie is
registered → self-check through the real client → autorecovery, if asked for. Stop order is the
reverse: autorecovery first (stopping bookies must not look like lost ones), then the bookies (each
SIGTERM, a grace period, then SIGKILL), ZooKeeper last, so bookies can unregister cleanly.
A child that exits on its own is reported (name, pid, exit code, log file) and the rest keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

from pybk.localcluster import steps
from pybk.localcluster.child import ChildProcess
from pybk.localcluster.layout import ClusterLayout

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long each phase may take before the start is declared failed. Generous: a cold JVM and
# three Python bookies on a busy 2-core machine take a while.
ZOOKEEPER_START_TIMEOUT_S = 60.0
BOOKIES_REGISTER_TIMEOUT_S = 90.0
SELF_CHECK_TIMEOUT_S = 60.0
# It leads once its ZooKeeper session campaigned; after a kill -9 of an earlier run, only once
# that run's session expired (zkTimeout, 10 s).
AUTORECOVERY_LEAD_TIMEOUT_S = 60.0


class StartupError(RuntimeError):
    """The cluster could not be brought up; the message says which part and where its log is."""


class LocalCluster:
    """ZooKeeper plus N bookies as child processes, laid out by a :class:`ClusterLayout`."""

    def __init__(self, layout: ClusterLayout, *, out: TextIO, grace_s: float = 10.0) -> None:
        self.layout = layout
        self.out = out
        self.grace_s = grace_s
        self.zookeeper = ChildProcess(layout.zookeeper_spec())
        self.bookies = [ChildProcess(layout.bookie_spec(i)) for i in range(layout.bookies)]
        self.autorecovery = ChildProcess(layout.autorecovery_spec()) if layout.autorecovery else None
        self.bookie_ids: list[str] = []
        self.cluster_created = False
        self.self_check: steps.SelfCheckResult | None = None
        self._reported_exits: set[str] = set()

    @property
    def children(self) -> list[ChildProcess]:
        return [self.zookeeper, *self.bookies, *([self.autorecovery] if self.autorecovery else [])]

    def started(self) -> list[ChildProcess]:
        """The children launched so far (autorecovery starts after the self-check)."""
        return [child for child in self.children if child.pid is not None]

    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    # -- start ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bring the whole cluster up or raise :class:`StartupError` (children are left for close())."""
        layout = self.layout
        self.say(f"starting ZooKeeper on {layout.zk_hosts} (log: {self.zookeeper.spec.log_path})")
        await self.zookeeper.start()
        await self._phase(
            "ZooKeeper to answer ruok",
            steps.wait_for_zookeeper(layout.host, layout.zk_port),
            ZOOKEEPER_START_TIMEOUT_S,
            [self.zookeeper],
        )
        self.cluster_created = await self._phase(
            "the cluster metadata to be initialised",
            steps.initialise_cluster(layout.zk_hosts),
            ZOOKEEPER_START_TIMEOUT_S,
            [self.zookeeper],
        )
        self.say("cluster metadata " + ("created" if self.cluster_created else "already present, kept"))
        # Registrations older than this belong to an earlier run (ZooKeeper's clock is ours: loopback).
        bookies_started_ms = int(time.time() * 1000)
        for index, bookie in enumerate(self.bookies):
            address = layout.bookie_address(index)
            self.say(f"starting {bookie.name} on {address} (log: {bookie.spec.log_path})")
            await bookie.start()
        expected_ports = {layout.bookie_port(i) for i in range(layout.bookies)}
        self.bookie_ids = await self._phase(
            f"{layout.bookies} bookie(s) to register in ZooKeeper",
            steps.wait_for_bookies(layout.zk_hosts, expected_ports, bookies_started_ms),
            BOOKIES_REGISTER_TIMEOUT_S,
            self.started(),
        )
        self.self_check = await self._phase(
            "the self-check (write and read back a replicated ledger)",
            steps.run_self_check(layout.zk_hosts, layout.bookies),
            SELF_CHECK_TIMEOUT_S,
            self.started(),
        )
        if self.autorecovery is not None:
            self.say(f"starting autorecovery (log: {self.autorecovery.spec.log_path})")
            await self.autorecovery.start()
            await self._phase(
                "autorecovery to lead",
                steps.wait_for_metric(layout.autorecovery_metrics_url, "autorecovery_leader 1.0"),
                AUTORECOVERY_LEAD_TIMEOUT_S,
                self.started(),
            )

    async def _phase(
        self, what: str, work: Awaitable[T], timeout_s: float, watched: list[ChildProcess]
    ) -> T:
        """Run one start-up step; fail fast if a watched child dies or the step overruns."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        deaths = [asyncio.ensure_future(child.wait()) for child in watched if child.running()]
        try:
            done: set[asyncio.Future[Any]] = set()
            if len(deaths) == len(watched):  # else one already died: report it right away
                done, _ = await asyncio.wait([task, *deaths], timeout=timeout_s,
                                             return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                try:
                    return task.result()
                except Exception as exc:
                    raise StartupError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            for child in watched:
                if not child.running():
                    self._reported_exits.add(child.name)
                    raise StartupError(
                        f"while waiting for {what}: {child.describe_exit()}{_last_words(child)}"
                    )
            raise StartupError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; "
                f"see the logs in {self.layout.log_dir}"
            )
        finally:
            for pending in [task, *deaths]:
                if not pending.done():
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await pending

    # -- run -----------------------------------------------------------------------------------

    async def watch(self, stop: asyncio.Event) -> bool:
        """Until ``stop`` is set, report every child that exits on its own. Returns False if every
        child exited before ``stop`` was set (nothing left to run)."""
        waits: dict[asyncio.Future[Any], ChildProcess] = {
            asyncio.ensure_future(child.wait()): child for child in self.children if child.running()
        }
        stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            while waits and not stop.is_set():
                done, _ = await asyncio.wait([stopper, *waits], return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    child = waits.pop(fut, None)
                    if child is not None and not child.stopping:
                        self.report_exit(child)
            if not waits and not stop.is_set():
                self.say("every process of the local cluster has exited; stopping")
                return False
            return True
        finally:
            for fut in [stopper, *waits]:
                fut.cancel()

    def report_exit(self, child: ChildProcess) -> None:
        if child.name in self._reported_exits:
            return
        self._reported_exits.add(child.name)
        self.say(f"WARNING: {child.describe_exit()}{_last_words(child)}")

    # -- stop ----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop autorecovery, the bookies (in parallel), then ZooKeeper. Safe to call after a
        failed start."""
        if self.autorecovery is not None:
            await self._stop_all([self.autorecovery])
        await self._stop_all(self.bookies)
        await self._stop_all([self.zookeeper])

    async def _stop_all(self, children: list[ChildProcess]) -> None:
        started = [c for c in children if c.pid is not None]
        for child in started:
            if not child.running() and not child.stopping:
                self.report_exit(child)
        codes = await asyncio.gather(*(c.stop(self.grace_s) for c in started))
        for child, code in zip(started, codes, strict=True):
            log.debug("%s stopped with code %s", child.name, code)


def _last_words(child: ChildProcess) -> str:
    tail = child.log_tail()
    return "".join(f"\n    | {line}" for line in tail) if tail else ""


async def run_until_signalled(
    cluster: LocalCluster,
    stop: asyncio.Event,
    on_ready: Callable[[LocalCluster], None],
) -> int:
    """Start ``cluster``, call ``on_ready``, watch it until ``stop`` is set, then close it.

    Returns 0 after a clean stop, 1 if the cluster could not start. ``stop`` may be set at any
    moment (Ctrl-C during start-up aborts the start and still stops every child)."""
    starting = asyncio.ensure_future(cluster.start())
    stopper = asyncio.ensure_future(stop.wait())
    rc = 0
    try:
        await asyncio.wait([starting, stopper], return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            try:
                starting.result()
            except StartupError as exc:
                cluster.say(f"ERROR: local cluster failed to start: {exc}")
                return 1
            on_ready(cluster)
            if not await cluster.watch(stop):
                rc = 1
        else:
            cluster.say("interrupted during start-up")
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
        return rc
    finally:
        stopper.cancel()
        cluster.say("stopping the local cluster ...")
        await cluster.close()
        cluster.say("stopped")
