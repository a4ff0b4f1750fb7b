"""The simulated cluster: seed tree, swarm parameters, network, ZooKeeper, bookies and clients.

Every random choice of a run comes from :class:`SeedTree`: one ``random.Random`` per named part,
derived from the master seed with SHA-256 (never Python's per-process string hash), so adding a
draw in one part does not shift the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from bkclient.bookie_client import BookieClientOptions
from bkclient.bookkeeper import BookKeeper
from bkclient.config import ClientConfig
from bkclient.context import ClientContext
from bkclient.placement import RandomPlacement
from bkmeta.metadata_client import MetadataClient
from bkmeta.registration import BookieServiceInfo
from bkproto.errors import MetadataStoreError
from bookie.handlers.common import HandlerLimits
from bookie.limits import ListenerLimits

from .bookie_node import BookieNode
from .client_conn import SimTcp, sim_connector
from .disk import DiskFaults, SimDisk
from .loop import SimLoop
from .network import Network
from .tcp import DEFAULT_TCP, TIGHT_TCP
from .trace import Trace
from .zk import SimZooKeeper

EPOCH_S = 1_767_225_600.0  # the simulated wall clock starts at 2026-01-01T00:00:00Z


class SeedTree:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def child(self, name: str) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}/{name}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))


# Budgets of about one of the workload's add messages (an add is a few hundred bytes here, an
# entry's body about 70), and read answers of a few entries each, so that requests queue.
_TIGHT_BUDGETS = {
    "add_in_progress_max_bytes": 1024,
    "add_in_progress_max_bytes_per_peer": 512,
    "add_unanswered_max_bytes": 2048,
    "add_unanswered_max_bytes_per_peer": 1024,
    "read_answers_max_bytes": 1024,
    "read_answers_max_bytes_per_peer": 512,
    "max_read_batch_bytes": 512,
}
# The add port's receive budget a few frames deep, and the clients' messages held below its share
# per peer (a larger frame is refused, and no frame of a well-behaved client may be). One
# connection per client: its second (a read stream beside an add stream, a new stream while the
# old one closes) is accepted and reset, and that stream goes over gRPC.
_TIGHT_LISTENER = {
    "max_buffered_bytes": 16384,
    "max_buffered_bytes_per_peer": 8192,
    "max_connections_per_peer": 1,
}
_TIGHT_BATCH_BYTES = 4096


@dataclass(frozen=True)
class Swarm:
    """The run's parameters, all drawn from the seed and printed with a failure (TigerBeetle's swarm)."""

    bookies: int
    quorums: tuple[tuple[int, int, int], ...]  # (E, Qw, Qa) choices for new ledgers
    fsync_ms: float
    fsync_spike_probability: float
    add_timeout_s: float
    read_timeout_s: float
    batch_interval_s: float
    fault_weight: float  # share of steps that inject a fault
    explicit_lac_interval_s: float  # writers' explicit LAC (0: off)
    # The bookies' addsPerLoopTurn: a small one answers a message slice by slice, so an answer
    # can be a count of successes followed by per-add results.
    adds_per_loop_turn: int
    # The bookies' byte budgets (adds in progress and unanswered, read answers not yet sent)
    # a few messages deep, so that requests wait in the budgets' queues while faults strike.
    tight_budgets: bool = False
    # Add streams served by the add port's AddPipeline (what the client uses in production)
    # rather than the gRPC handler's task and queue.
    add_pipeline: bool = False
    # The clients' add and read streams over the bookies' add port, its bytes over simulated
    # TCP connections (as in production), rather than over the simulated gRPC streams.
    add_port: bool = False
    # The bookies journal through the real ``Journal`` on simulated files (``journal_disk``)
    # rather than the memory storage's model of a journal.
    real_journal: bool = False

    @classmethod
    def draw(cls, rng: random.Random) -> Swarm:
        bookies = rng.randint(3, 7)
        quorums = []
        for _ in range(3):
            e = rng.randint(2, min(bookies, 5))
            qw = rng.randint(2, e)
            qa = rng.randint(1, qw)
            quorums.append((e, qw, qa))
        return cls(
            bookies=bookies,
            quorums=tuple(quorums),
            fsync_ms=rng.choice((0.2, 1.0, 5.0, 20.0)),
            fsync_spike_probability=rng.choice((0.0, 0.01, 0.1)),
            add_timeout_s=rng.choice((1.0, 2.0, 5.0)),
            read_timeout_s=rng.choice((1.0, 2.0, 5.0)),
            batch_interval_s=rng.choice((0.0, 0.003)),
            fault_weight=rng.choice((0.05, 0.15, 0.3)),
            explicit_lac_interval_s=rng.choice((0.0, 0.0, 0.5)),
            adds_per_loop_turn=rng.choice((4096, 4096, 2)),
            tight_budgets=rng.choice((False, False, True)),  # drawn last: earlier draws stay
            add_pipeline=rng.choice((False, True)),
            add_port=rng.choice((False, True)),
            real_journal=rng.choice((False, True)),
        )

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in asdict(self).items())


@dataclass
class Broken:
    """Test-only switches that plant a known bug (the checkers must catch each)."""

    ack_qa_minus_1: bool = False  # the writer completes an add at Qa-1 acks
    skip_fence_check: bool = False  # bookies accept ordinary adds on a fenced ledger
    recover_without_coverage: bool = False  # one NoSuchEntry answer ends recovery
    ack_before_fsync: bool = False  # bookies acknowledge before the journal fsync
    # the real journal syncs a batch on the loop while a force() barrier is with its writer
    inline_beside_barrier: bool = False
    # the real journal lets a submit pass those waiting in line for room
    submit_jumps_the_line: bool = False
    # the real journal acknowledges a batch whose write failed, and goes on
    ack_failed_write: bool = False

    @classmethod
    def named(cls, name: str) -> Broken:
        if not name:
            return cls()
        if name not in cls.__dataclass_fields__:
            raise ValueError(f"unknown broken variant {name!r}; known: {', '.join(cls.__dataclass_fields__)}")
        return cls(**{name: True})


@dataclass
class World:
    seeds: SeedTree
    loop: SimLoop
    trace: Trace
    swarm: Swarm
    broken: Broken
    network: Network = field(init=False)
    zk: SimZooKeeper = field(init=False)
    tcp: SimTcp = field(init=False)  # the add port's connections
    bookies: dict[str, BookieNode] = field(default_factory=dict)
    registrations: dict[str, MetadataClient] = field(default_factory=dict)  # bookie -> its metadata client
    clock_offset_s: float = 0.0
    lost: set[str] = field(default_factory=set)
    journal_breaches: list[str] = field(default_factory=list)  # see SimJournalFiles.check_exclusive

    def __post_init__(self) -> None:
        self.network = Network(self.loop, self.seeds.child("network"), self.trace)
        self.zk = SimZooKeeper(
            self.network, self.trace, self.seeds.child("zk"), lambda: int(self.wall_time() * 1000)
        )
        for i in range(self.swarm.bookies):
            bookie_id = f"b{i}:3181"  # host:port, as BookKeeper ids are
            faults = DiskFaults(
                fsync_ms=self.swarm.fsync_ms, spike_probability=self.swarm.fsync_spike_probability
            )
            disk = self._disk(SimDisk(bookie_id, self.seeds.child(f"disk/{bookie_id}"), self.trace, faults))
            node = BookieNode(bookie_id, self.network, disk, self.trace)
            node.skip_fence_check = self.broken.skip_fence_check
            node.wall_clock_ms = self.wall_time_ms
            node.add_pipeline = self.swarm.add_pipeline
            node.limits = HandlerLimits(
                adds_per_loop_turn=self.swarm.adds_per_loop_turn,
                **(_TIGHT_BUDGETS if self.swarm.tight_budgets else {}),
            )
            node.listener_limits = ListenerLimits(**(_TIGHT_LISTENER if self.swarm.tight_budgets else {}))
            self.bookies[bookie_id] = node
        self.tcp = SimTcp(TIGHT_TCP if self.swarm.tight_budgets else DEFAULT_TCP, self.seeds.child("tcp"))

    async def setup(self) -> None:
        """The cluster's znodes, and a metadata client for the harness (checkers, GC)."""
        self.meta = await MetadataClient.over(
            self.zk.session_for("harness"), require_cluster=False, watch_bookies=False
        )
        await self.meta.init_new_cluster()
        await self.meta.bookie_watcher.start()

    def budgets_held(self) -> dict[str, str]:
        """What each running bookie's byte budgets hold now, where they hold anything."""
        held = {}
        for bookie_id, node in sorted(self.bookies.items()):
            servicer = node.servicer
            if not node.up or servicer is None:
                continue
            budgets = {
                "adds in progress": servicer.add_entries.budget,
                "adds unanswered": servicer.add_entries.unanswered,
                "read answers": servicer.read_entries.answer_bytes,
            }
            if node.add_port is not None:
                budgets["add-port frames"] = node.add_port.receive_budget
            for name, budget in budgets.items():
                if budget.used or budget.waiting:
                    held[f"{bookie_id}: {name}"] = f"{budget.used} bytes, {budget.waiting} waiting"
            if node.add_port is not None and node.add_port.open_connections:
                held[f"{bookie_id}: add-port connections"] = f"{node.add_port.open_connections} open"
        return held

    async def all_registered(self, timeout_s: float) -> None:
        """Until every bookie not lost is registered (a restarted one waits for its previous
        session's registration to expire first)."""
        wanted = {b for b in self.bookies if b not in self.lost}
        await self.meta.bookie_watcher.wait_for(lambda w: wanted <= set(w.writable_bookies()), timeout_s)

    # -- bookies -------------------------------------------------------------------------------

    async def start_bookie(self, bookie_id: str) -> None:
        node = self.bookies[bookie_id]
        if bookie_id in self.lost or node.up:
            return
        await node.start()
        self.zk.process_started(bookie_id)
        epoch = node.epoch
        host, _, port = bookie_id.partition(":")
        info = BookieServiceInfo(bookie_id, host, int(port))
        # Like the daemon's ZooKeeper client, keep trying until registered (or crashed again).
        while node.up and node.epoch == epoch:
            try:
                meta = await self.zk.client_for(bookie_id, watch_bookies=False)
                self.registrations[bookie_id] = meta
                await meta.bookie_registration(info).register()
                return
            except MetadataStoreError:
                await asyncio.sleep(1.0)

    def crash_bookie(self, bookie_id: str, host_down: bool) -> None:
        node = self.bookies[bookie_id]
        if not node.up:
            return
        node.crash(host_down)
        self.registrations.pop(bookie_id, None)
        self.zk.process_died(bookie_id)  # its registration stays until the session times out

    def _disk(self, disk: SimDisk) -> SimDisk:
        """A bookie's disk as the swarm and the broken variant want it."""
        disk.ack_before_fsync = self.broken.ack_before_fsync
        disk.inline_beside_barrier = self.broken.inline_beside_barrier
        disk.submit_jumps_the_line = self.broken.submit_jumps_the_line
        disk.ack_failed_write = self.broken.ack_failed_write
        broken = self.broken
        disk.real_journal = self.swarm.real_journal or (
            broken.inline_beside_barrier or broken.submit_jumps_the_line or broken.ack_failed_write
        )
        disk.journal_breaches = self.journal_breaches
        return disk

    def lose_bookie(self, bookie_id: str) -> None:
        """Permanent loss (the disk is gone): the bookie crashes and never comes back; its data
        must be re-replicated from the other replicas."""
        self.crash_bookie(bookie_id, host_down=True)
        self.lost.add(bookie_id)
        node = self.bookies[bookie_id]
        node.disk = self._disk(
            SimDisk(bookie_id, self.seeds.child(f"disk/{bookie_id}/new"), self.trace, node.disk.faults)
        )
        self.trace.event(f"bookie {bookie_id} lost for good (its disk is gone)")

    def loss_allowed(self) -> bool:
        """One bookie may be lost when every ledger keeps a copy of each acknowledged entry
        elsewhere (Qa >= 2) and a spare bookie remains for every ensemble."""
        if self.lost:
            return False
        live = sum(1 for b in self.bookies if b not in self.lost)
        return all(qa >= 2 and e + 2 <= live for e, _, qa in self.swarm.quorums)

    def expire_bookie_session(self, bookie_id: str) -> None:
        """Session expiry of a live bookie: BookieRegistration re-registers on the new session."""
        if bookie_id in self.registrations:
            self.trace.event(f"zk: session of {bookie_id} expires")
            self.zk.expire_sessions_of(bookie_id)

    # -- clients -------------------------------------------------------------------------------

    async def client(self, name: str) -> BookKeeper:
        swarm = self.swarm
        config = ClientConfig(
            add_entry_timeout_s=swarm.add_timeout_s,
            read_entry_timeout_s=swarm.read_timeout_s,
            speculative_read_timeout_s=swarm.read_timeout_s / 2,
            long_poll_timeout_s=2.0,
            explicit_lac_interval_s=swarm.explicit_lac_interval_s,
            bookie_min_batch_interval_s=swarm.batch_interval_s,
            # Hold back whenever anything queued during a round trip: the most holding, the most
            # interleavings of held messages with faults.
            bookie_behind_min_adds=1,
            bookie_use_add_port=swarm.add_port,
            **({"bookie_max_batch_bytes": _TIGHT_BATCH_BYTES} if swarm.tight_budgets else {}),
        )
        options = BookieClientOptions(
            max_inflight_messages=config.bookie_max_inflight_messages,
            max_inflight_messages_keeping_up=config.bookie_max_inflight_messages_keeping_up,
            min_batch_interval_s=config.bookie_min_batch_interval_s,
            behind_min_adds=config.bookie_behind_min_adds,
            max_batch_bytes=config.bookie_max_batch_bytes,
            default_timeout_s=config.read_entry_timeout_s,
            use_add_port=config.bookie_use_add_port,
        )
        metadata = await self.zk.client_for(name)
        connector = sim_connector(self.network, name, self.bookies.get, options, self.tcp)
        ctx = ClientContext.create(metadata, config, SimClock(self), connector)
        ctx.placement = RandomPlacement(self.seeds.child(f"placement/{name}"))  # seeded
        return BookKeeper(ctx)

    # -- wall clock ----------------------------------------------------------------------------

    def wall_time(self) -> float:
        return EPOCH_S + self.loop.time() + self.clock_offset_s

    def wall_time_ms(self) -> int:
        return int(self.wall_time() * 1000)

    @contextmanager
    def wall_clock(self) -> Iterator[None]:
        """``time.time`` follows virtual time (plus clock jumps) while the run lasts. The loop
        itself uses ``time.monotonic``, which is left alone (patching it hangs asyncio.sleep)."""
        real = time.time
        time.time = self.wall_time
        try:
            yield
        finally:
            time.time = real


class SimClock:
    """The client's ``bkmeta.clock.Clock``: the virtual loop time, and the simulated wall clock."""

    def __init__(self, world: World) -> None:
        self._world = world

    def monotonic(self) -> float:
        return self._world.loop.time()

    def time_ms(self) -> int:
        return int(self._world.wall_time() * 1000)
