"""Limits that keep unauthenticated load from taking a bookie down, shared by its listeners (the
gRPC service, the add port, the HTTP admin endpoint).

A bookie serves whoever connects, so every resource a peer can make it hold is bounded, and the
bounds that a single peer could exhaust are also split per peer (per IP address, as ZooKeeper's
``maxClientCnxns``), so one peer cannot lock out the others:

* connections on the add port, in total and per peer (gRPC: in total through its core, per peer
  for connections carrying calls, see ``bookie.grpc_intake``);
* bytes of add-port frames read but not yet handed to the add path (a frame's length header
  reserves its bytes first, so a peer announcing big frames and sending nothing holds a
  reservation, not memory, and only for the frame timeout);
* adds per message (a message is refused whole beyond it) and adds processed per loop turn (a big
  message is processed in slices so other clients' adds interleave);
* long-poll reads parked per peer;
* time: a started frame must complete within the frame timeout (slow senders), and answers must be
  taken by the peer within the write timeout (peers that never read).

Past a limit the peer gets an error naming the limit, or its connection is closed with a warning in
the log, and ``bookkeeper_server_LIMIT_REJECTIONS{listener, limit}`` counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError

log = logging.getLogger(__name__)

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """The limits; each field names its configuration key (``bookie.config``)."""

    max_connections: int = 1024  # maxConnections: add port, and gRPC (its core refuses more)
    max_connections_per_peer: int = 64  # maxConnectionsPerIp: add port
    max_buffered_bytes: int = 128 * MiB  # maxBufferedBytes: add-port frames being received, all peers
    max_buffered_bytes_per_peer: int = 32 * MiB  # maxBufferedBytesPerIp
    frame_timeout_s: float = 30.0  # frameTimeoutMs: from a frame's first byte to its last
    write_timeout_s: float = 60.0  # writeTimeoutMs: a peer not taking answers this long is closed
    max_adds_per_message: int = 100_000  # maxAddsPerMessage
    adds_per_loop_turn: int = 4096  # addsPerLoopTurn
    max_long_polls_per_peer: int = 2500  # maxLongPollsPerIp
    http_max_connections: int = 16  # httpServerMaxConnections: requests served at once (a quarter per IP)
    http_request_timeout_s: float = 10.0  # httpServerRequestTimeoutMs: to send a whole request
    max_slow_requests: int = 16  # maxSlowRequests: gRPC calls whose request is slow to arrive, all peers
    max_slow_requests_per_peer: int = 4  # maxSlowRequestsPerIp
    connection_idle_timeout_s: float = 300.0  # connectionIdleTimeoutMs: a gRPC connection without calls

    def __post_init__(self) -> None:
        if self.max_connections_per_peer > self.max_connections:
            raise ValueError(
                f"maxConnectionsPerIp ({self.max_connections_per_peer}) exceeds maxConnections"
                f" ({self.max_connections})"
            )
        if self.max_slow_requests_per_peer > self.max_slow_requests:
            raise ValueError(
                f"maxSlowRequestsPerIp ({self.max_slow_requests_per_peer}) exceeds maxSlowRequests"
                f" ({self.max_slow_requests})"
            )
        if self.max_buffered_bytes_per_peer > self.max_buffered_bytes:
            raise ValueError(
                f"maxBufferedBytesPerIp ({self.max_buffered_bytes_per_peer}) exceeds maxBufferedBytes"
                f" ({self.max_buffered_bytes})"
            )


class LimitStats:
    """``bookkeeper_server_LIMIT_REJECTIONS{listener, limit}``: what was refused or closed."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self._counter = Counter(
            "bookkeeper_server_LIMIT_REJECTIONS",
            "Requests refused or connections closed because a limit was reached (pybookkeeper)",
            ["listener", "limit"],
            registry=registry,
        )

    def hit(self, listener: str, limit: str) -> None:
        self._counter.labels(listener, limit).inc()


class _HasPeer(Protocol):
    def peer(self) -> str: ...


# The gRPC context of the request being served (set by the handlers' boundary for the request's
# task), so that limits deep in the handlers (long polls) learn the peer without threading it
# through every call, and only when they need it.
CURRENT_CALL: ContextVar[_HasPeer | None] = ContextVar("bookie_current_call", default=None)


def current_peer() -> str:
    """The IP address of the peer of the request being served ("" outside a request)."""
    call = CURRENT_CALL.get()
    return peer_host(call.peer()) if call is not None else ""


def current_listener() -> str:
    """The ``listener`` label of the request being served: its call's own (a request that came
    over the add port says so), else gRPC's."""
    return str(getattr(CURRENT_CALL.get(), "listener", "grpc"))


def peer_host(peer: object) -> str:
    """The IP address of a peer: asyncio's ``peername`` tuple or gRPC's ``ipv4:1.2.3.4:5678`` /
    ``ipv6:[::1]:5678``. Anything else is its own text."""
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    text = str(peer)
    kind, sep, rest = text.partition(":")
    if not sep:
        return text
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return text


def _decrease(counts: dict[str, int], peer: str, amount: int) -> None:
    """Take ``amount`` off a peer's count, forgetting the peer at zero (peers come and go)."""
    left = counts[peer] - amount
    if left:
        counts[peer] = left
    else:
        del counts[peer]


class ConnectionCounter:
    """Open connections, in total and per peer."""

    def __init__(self, max_total: int, max_per_peer: int) -> None:
        self.max_total = max_total
        self.max_per_peer = max_per_peer
        self.total = 0
        self._per_peer: dict[str, int] = {}

    def admit(self, peer: str) -> str | None:
        """Count a new connection; or the name of the limit it would break (not counted then)."""
        if self.total >= self.max_total:
            return "connections"
        if self._per_peer.get(peer, 0) >= self.max_per_peer:
            return "connections_per_ip"
        self.total += 1
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        return None

    def release(self, peer: str) -> None:
        self.total -= 1
        _decrease(self._per_peer, peer, 1)


class Reservation:
    """A queued reservation of a :class:`PeerByteBudget` (``reserve_later``): its bytes are
    reserved for it in its turn, then its callback runs (soon after, on the loop)."""

    __slots__ = ("_budget", "_callback", "cancelled", "granted", "in_line", "nbytes", "peer", "ran", "seq")

    def __init__(
        self, budget: PeerByteBudget, peer: str, nbytes: int, callback: Callable[[], None], seq: int
    ) -> None:
        self._budget = budget
        self._callback = callback
        self.peer = peer
        self.nbytes = nbytes
        self.seq = seq  # arrival order
        self.in_line = False  # at its peer's head, waiting for the total (not for its share)
        self.granted = False  # its bytes are reserved, its callback due
        self.ran = False  # its callback ran: the bytes are the caller's
        self.cancelled = False

    def cancel(self) -> None:
        """Withdraw it: out of the queue if still waiting, its bytes given back if granted and
        its callback has not run yet. Once the callback ran, the bytes are the caller's to give
        back, and this does nothing."""
        if self.ran or self.cancelled:
            return
        self.cancelled = True
        if self.granted:
            self._budget.release(self.peer, self.nbytes)
        else:
            self._budget._withdraw(self)

    def _run(self) -> None:
        if not self.cancelled:
            self.ran = True
            self._callback()


class PeerByteBudget:
    """Bytes reserved, in total and per peer (one event loop). A reservation larger than the peer's
    share is still granted when the peer holds nothing else, so a maximal frame always fits.

    Reservations that do not fit wait and are granted in turn as bytes come back, so a large one
    is not passed for ever by a stream of small ones that fit sooner. Only the total is first
    come, first served: a reservation held back by its own peer's share waits for that peer's
    bytes alone, and the other peers' go past it (one peer must not hold up the others). So a
    peer's reservations wait in a queue of their own, and the heads of those queues that wait
    for the total stand in one line, oldest first. Every step is O(log n) in the reservations
    waiting: a peer with thousands of them costs the others' requests nothing per request."""

    def __init__(self, max_total: int, max_per_peer: int) -> None:
        self.max_total = max_total
        self.max_per_peer = min(max_per_peer, max_total)
        self.used = 0
        self._per_peer: dict[str, int] = {}
        # Waiting reservations, bounded by the requests and streams waiting (each waits for one
        # reservation at a time): per peer in arrival order, and the line (a heap by arrival)
        # of the peers' heads not held back by their share. A withdrawn reservation leaves both
        # lazily, but never stays at the front of either (see _withdraw, _grant).
        self._queues: dict[str, deque[Reservation]] = {}
        self._line: list[tuple[int, Reservation]] = []
        self._waiting = 0
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Reservations waiting for their turn."""
        return self._waiting

    def _over_share(self, peer: str, nbytes: int) -> bool:
        held = self._per_peer.get(peer, 0)
        return held != 0 and held + nbytes > self.max_per_peer

    def _over_total(self, nbytes: int) -> bool:
        return self.used != 0 and self.used + nbytes > self.max_total

    def try_acquire(self, peer: str, nbytes: int) -> bool:
        """Reserve ``nbytes`` if they fit now and no reservation waits before them (one of the
        same peer, or one waiting for the total); False (nothing reserved) if not. Nothing is
        ever too many bytes to reserve, and needs no turn."""
        if not nbytes:
            return True
        if self._line or peer in self._queues:
            return False
        # _over_share, _over_total and _take inline: this runs for every add-port message
        held = self._per_peer.get(peer, 0)
        if held and held + nbytes > self.max_per_peer:
            return False
        used = self.used
        if used and used + nbytes > self.max_total:
            return False
        self.used = used + nbytes
        self._per_peer[peer] = held + nbytes
        return True

    def reserve_later(self, peer: str, nbytes: int, callback: Callable[[], None]) -> Reservation:
        """Queue a reservation of ``nbytes`` (after a ``try_acquire`` said no); ``callback`` runs
        once they are reserved for the caller (for a caller without a task to wait in)."""
        reservation = Reservation(self, peer, nbytes, callback, next(self._arrivals))
        if not nbytes:
            self._granted(reservation)
            return reservation
        self._waiting += 1
        queue = self._queues.get(peer)
        if queue:
            queue.append(reservation)  # behind the peer's own
            return reservation
        self._queues[peer] = deque((reservation,))
        self._head(reservation)
        self._grant()  # at once if nothing is in its way
        return reservation

    async def acquire(self, peer: str, nbytes: int) -> None:
        """Wait until ``nbytes`` are reserved, in turn (callers bound the wait with a timeout)."""
        if self.try_acquire(peer, nbytes):
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reservation = self.reserve_later(peer, nbytes, functools.partial(_wake, granted))
        try:
            await granted
        except BaseException:  # cancelled (a timeout): the bytes go back, granted or not
            if reservation.ran:
                self.release(peer, nbytes)
            else:
                reservation.cancel()
            raise

    def release(self, peer: str, nbytes: int) -> None:
        if not nbytes:
            return
        self.used -= nbytes
        _decrease(self._per_peer, peer, nbytes)
        if self._waiting:
            queue = self._queues.get(peer)
            if queue and not queue[0].in_line:
                self._head(queue[0])  # held back by this peer's share until now, maybe
            self._grant()

    def release_for(self, peer: str, nbytes: int, _done: object) -> None:
        """Done-callback form of :meth:`release`."""
        self.release(peer, nbytes)

    def _head(self, reservation: Reservation) -> None:
        """``reservation`` is its peer's first: in the line, unless its peer's share holds it
        back (then the peer's next release looks again)."""
        if not self._over_share(reservation.peer, reservation.nbytes):
            reservation.in_line = True
            heapq.heappush(self._line, (reservation.seq, reservation))

    def _granted(self, reservation: Reservation) -> None:
        peer, nbytes = reservation.peer, reservation.nbytes
        if nbytes:
            self.used += nbytes
            self._per_peer[peer] = self._per_peer.get(peer, 0) + nbytes
        reservation.granted = True
        # Soon, not here: the releaser may be half-way through its own bookkeeping.
        asyncio.get_running_loop().call_soon(reservation._run)

    def _withdraw(self, reservation: Reservation) -> None:
        """A waiting reservation cancelled. It leaves its peer's queue and the line when it gets
        to their front (O(1) now: a peer with thousands waiting may drop them all at once)."""
        self._waiting -= 1
        queue = self._queues[reservation.peer]
        if queue[0] is reservation:
            self._next_head(reservation.peer, queue)
            self._grant()  # it may have held up those behind it

    def _next_head(self, peer: str, queue: deque[Reservation]) -> None:
        """The peer's first reservation is gone (granted or withdrawn): the next one still
        waiting comes to the front, and into the line if its share lets it."""
        queue.popleft()
        while queue and queue[0].cancelled:
            queue.popleft()
        if queue:
            self._head(queue[0])  # after a grant: the share counts what it took
        else:
            del self._queues[peer]

    def _grant(self) -> None:
        """Grant the line's reservations, oldest first, while they fit the total."""
        line = self._line
        while line:
            reservation = line[0][1]
            if not reservation.cancelled and self._over_total(reservation.nbytes):
                return
            heapq.heappop(line)
            reservation.in_line = False
            if reservation.cancelled:
                continue  # withdrawn while in the line
            self._waiting -= 1
            self._granted(reservation)
            self._next_head(reservation.peer, self._queues[reservation.peer])


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # not cancelled meanwhile
        waiter.set_result(None)


class PeerLongPolls:
    """Long-poll reads parked per peer; one more is refused with ETOOMANYREQUESTS."""

    def __init__(self, max_per_peer: int, stats: LimitStats) -> None:
        self.max_per_peer = max_per_peer
        self._stats = stats
        self._parked: dict[str, int] = {}

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        peer = current_peer()
        held = self._parked.get(peer, 0)
        if held >= self.max_per_peer:
            self._stats.hit(current_listener(), "long_polls_per_ip")
            raise BookieError(
                bookie_pb2.ETOOMANYREQUESTS,
                f"{held} long-poll reads from {peer or 'this peer'} already parked (maxLongPollsPerIp)",
            )
        self._parked[peer] = held + 1
        try:
            yield
        finally:
            _decrease(self._parked, peer, 1)


class QuietLog:
    """Logs at most one warning per ``interval_s`` for a kind of repeated fault (e.g. unparseable
    requests), with how many were left out: a peer sending garbage must not flood the log."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._next_at = 0.0
        self._skipped = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next_at:
                self._skipped += 1
                return
            skipped, self._skipped = self._skipped, 0
            self._next_at = now + self._interval_s
        suffix = f" ({skipped} more like it not logged)" if skipped else ""
        self._log.warning(message + suffix, *args)
