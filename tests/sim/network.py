"""The simulated network: connections between nodes, with per-link latency, slow links, partitions
and connection resets.

Faults follow what TCP under gRPC can do. Within a live connection nothing is lost or reordered:
messages sent while a partition cuts the link are held and go out when it heals. A connection ends
by a *reset* (the peer process died: at once; a partition or a dead host: after the keepalive
timeout), and a reset fails every call in flight on it, on both ends, so the client sees an error,
never a silently missing answer. A call's deadline can still expire first.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .trace import Trace

KEEPALIVE_S = 15.0  # the client's gRPC keepalive: 10 s between pings + 5 s to answer
RST_S = 0.0005  # a dead process's host answers at once


@dataclass
class LinkProfile:
    latency_ms: float  # one-way, typical
    jitter_ms: float  # uniform extra
    slow_factor: float = 1.0  # a slow link multiplies both

    def delay_s(self, rng: random.Random) -> float:
        return (self.latency_ms + rng.uniform(0.0, self.jitter_ms)) * self.slow_factor / 1000.0


class ConnectionReset(Exception):
    """Raised to senders on a connection that was reset."""


@dataclass(eq=False)
class Connection:
    """One TCP connection from ``client`` to ``server`` (a node name). ``epoch`` is the server's
    incarnation when it was opened: nothing reaches a later incarnation over it."""

    network: Network
    cid: int
    client: str
    server: str
    epoch: int
    alive: bool = True
    _last_arrival: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    _held: list[tuple[bool, Callable[[], None], str]] = field(default_factory=list)
    _on_reset: list[Callable[[], None]] = field(default_factory=list)

    def send(self, to_server: bool, deliver: Callable[[], None], what: str) -> None:
        """Deliver later, in order with the other messages of this direction, unless reset first."""
        if not self.alive:
            return
        src, dst = (self.client, self.server) if to_server else (self.server, self.client)
        if self.network.blocked(src, dst):
            self._held.append((to_server, deliver, what))
            return
        self._schedule(to_server, deliver, what)

    def _schedule(self, to_server: bool, deliver: Callable[[], None], what: str) -> None:
        net = self.network
        src, dst = (self.client, self.server) if to_server else (self.server, self.client)
        # Strictly after the previous message: asyncio's timer heap does not keep equal times in order.
        at = max(
            net.loop.time() + net.profile(src, dst).delay_s(net.rng), self._last_arrival[to_server] + 1e-6
        )
        self._last_arrival[to_server] = at

        def arrive() -> None:
            if self.alive:
                net.trace.tick("msg", self.cid, src, dst, what)
                deliver()

        net.loop.call_at(at, arrive)

    def release_held(self) -> None:
        held, self._held = self._held, []
        for to_server, deliver, what in held:
            if self.network.blocked(
                *((self.client, self.server) if to_server else (self.server, self.client))
            ):
                self._held.append((to_server, deliver, what))
            else:
                self._schedule(to_server, deliver, what)

    def on_reset(self, callback: Callable[[], None]) -> None:
        if self.alive:
            self._on_reset.append(callback)
        else:
            callback()

    def reset(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self._held.clear()
        self.network.connections.pop(self.cid, None)
        self.network.trace.event(f"net reset {self.client}->{self.server} #{self.cid}: {why}")
        callbacks, self._on_reset = self._on_reset, []
        for callback in callbacks:
            callback()

    def reset_later(self, delay_s: float, why: str) -> None:
        self.network.loop.call_later(delay_s, self.reset, why)


class Network:
    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, trace: Trace) -> None:
        self.loop = loop
        self.rng = rng
        self.trace = trace
        self.default = LinkProfile(latency_ms=rng.uniform(0.1, 2.0), jitter_ms=rng.uniform(0.0, 3.0))
        self.links: dict[tuple[str, str], LinkProfile] = {}
        self._blocked: set[tuple[str, str]] = set()
        self.connections: dict[int, Connection] = {}
        self._next_cid = 0
        # node name -> (incarnation, up); nodes not listed are always up (clients, ZooKeeper)
        self.servers: dict[str, list[int]] = {}
        self.listeners: list[Callable[[], None]] = []  # told after every partition change

    # -- topology ----------------------------------------------------------------------------

    def profile(self, src: str, dst: str) -> LinkProfile:
        return self.links.get((src, dst), self.default)

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._blocked

    def reachable(self, a: str, b: str) -> bool:
        return not self.blocked(a, b) and not self.blocked(b, a)

    def server_up(self, name: str) -> bool:
        state = self.servers.get(name)
        return state is None or state[1] == 1

    def epoch(self, name: str) -> int:
        state = self.servers.get(name)
        return 0 if state is None else state[0]

    # -- connections -------------------------------------------------------------------------

    def connect(self, client: str, server: str) -> Connection:
        """A new connection. To a server that is down, or across a partition, it is reset after
        the time TCP would take to notice (at once for a refused connection)."""
        self._next_cid += 1
        conn = Connection(self, self._next_cid, client, server, self.epoch(server))
        self.connections[conn.cid] = conn
        if not self.server_up(server):
            conn.reset_later(self._down_delay(server), "connection refused or host down")
        elif not self.reachable(client, server):
            self._watch_partitioned(conn)
        return conn

    def _down_delay(self, server: str) -> float:
        state = self.servers.get(server)
        return RST_S if state is not None and state[2] else KEEPALIVE_S

    def _watch_partitioned(self, conn: Connection) -> None:
        def check() -> None:
            if conn.alive and not self.reachable(conn.client, conn.server):
                conn.reset("keepalive timeout across a partition")

        self.loop.call_later(KEEPALIVE_S, check)

    # -- faults -------------------------------------------------------------------------------

    def server_crashed(self, name: str, host_down: bool) -> None:
        """Every connection to ``name`` ends: at once if only the process died (the host answers
        with RST), after the keepalive timeout if the host is gone."""
        state = self.servers.setdefault(name, [0, 1, 0])
        state[1] = 0
        state[2] = 0 if host_down else 1
        delay = KEEPALIVE_S if host_down else RST_S
        for conn in self._of(name):
            conn.reset_later(delay, "server crashed" + (" (host down)" if host_down else ""))

    def server_started(self, name: str) -> None:
        state = self.servers.setdefault(name, [0, 1, 0])
        state[0] += 1
        state[1] = 1

    def client_crashed(self, name: str) -> None:
        for conn in self._of(name):
            conn.reset(f"{name} crashed")

    def _of(self, name: str) -> list[Connection]:
        return [c for c in self.connections.values() if name in (c.client, c.server)]

    def partition(self, isolated: set[str], everyone: set[str], one_way: bool = False) -> None:
        """Cut ``isolated`` from the rest (both ways, or only the isolated side's sends)."""
        rest = everyone - isolated
        for a in sorted(isolated):
            for b in sorted(rest):
                self._blocked.add((a, b))
                if not one_way:
                    self._blocked.add((b, a))
        for conn in list(self.connections.values()):
            if not self.reachable(conn.client, conn.server):
                self._watch_partitioned(conn)
        for listener in self.listeners:
            listener()

    def heal(self) -> None:
        self._blocked.clear()
        for conn in list(self.connections.values()):
            conn.release_held()
        for listener in self.listeners:
            listener()
