"""ZooKeeper in the simulation: bkmeta's own in-memory ZooKeeper (``bkmeta.memory_store``), with
the network in front of it.

Every process (client, bookie, the admin) holds its own session, and bkmeta runs over it unchanged:
``ZkLedgerManager`` (real serialization, versions as CAS tokens, id generation), bookie
registration (ephemerals that go when the session expires, re-registration on a new session) and
``BookieWatcher`` (child watches). The simulation adds the network: each operation pays the link's
latency; a process cut from ZooKeeper by a partition is disconnected (its operations fail with a
connection loss at once, its session expires after the timeout unless the partition heals first),
and watch events arrive late.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from bkmeta.memory_store import MemorySession, MemoryZooKeeper
from bkmeta.metadata_client import MetadataClient
from bkmeta.store import WatchEvent
from bkproto.errors import MetadataStoreError

from .network import Network
from .trace import Trace

ZK = "zk"
SESSION_TIMEOUT_S = 10.0


class SimSession(MemorySession):
    """A session that knows which simulated process holds it."""

    def __init__(self, server: SimZooKeeper, owner: str) -> None:
        self.owner = owner  # before MemorySession.__init__, which opens the session
        super().__init__(server, SESSION_TIMEOUT_S)


class SimZooKeeper(MemoryZooKeeper):
    def __init__(self, network: Network, trace: Trace, rng: random.Random, now_ms: Callable[[], int]) -> None:
        super().__init__(before_op=self._before_op, watch_delay=self._watch_delay, now_ms=now_ms)
        self.network = network
        self.trace = trace
        self.rng = rng
        self.owner_of: dict[int, str] = {}  # session id -> process
        self.sessions: list[SimSession] = []
        self.dead: set[str] = set()  # processes that crashed: their sessions never reconnect
        network.listeners.append(self.follow_partitions)

    def _open_session(self, client: MemorySession) -> int:
        session_id = super()._open_session(client)
        self.owner_of[session_id] = getattr(client, "owner", "?")
        return session_id

    async def _before_op(self, session_id: int, op: str, path: str) -> None:
        owner = self.owner_of.get(session_id, "?")
        net = self.network
        await asyncio.sleep(net.profile(owner, ZK).delay_s(net.rng) + net.profile(ZK, owner).delay_s(net.rng))
        self.trace.tick("zk", owner, op, path)
        if not net.reachable(owner, ZK):
            raise MetadataStoreError(f"{op} {path}: connection loss")

    def _watch_delay(self, event: WatchEvent) -> float:
        return self.network.default.delay_s(self.rng)

    def session_for(self, owner: str) -> SimSession:
        session = SimSession(self, owner)
        self.sessions.append(session)
        if not self.network.reachable(owner, ZK):
            session.disconnect()
        return session

    async def client_for(self, owner: str, *, watch_bookies: bool = True) -> MetadataClient:
        """A MetadataClient over a new session of ``owner`` (the cluster exists already)."""
        return await MetadataClient.over(self.session_for(owner), watch_bookies=watch_bookies)

    def follow_partitions(self) -> None:
        """A process cut from ZooKeeper loses its connection; it reconnects once healed."""
        for session in self.sessions:
            if session.owner in self.dead:
                continue
            if self.network.reachable(session.owner, ZK):
                session.reconnect()
            else:
                session.disconnect()

    def process_died(self, owner: str) -> None:
        """The process stopped heartbeating: its sessions expire after the timeout."""
        self.dead.add(owner)
        for session in self.sessions:
            if session.owner == owner:
                session.disconnect()
        self.sessions = [s for s in self.sessions if s.owner != owner]
        self.trace.event(f"zk: sessions of {owner} will expire in {SESSION_TIMEOUT_S:.0f} s")

    def process_started(self, owner: str) -> None:
        self.dead.discard(owner)

    def expire_sessions_of(self, owner: str) -> None:
        for session_id, holder in sorted(self.owner_of.items()):
            if holder == owner:
                self.expire_session(session_id)
