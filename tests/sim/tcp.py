"""A TCP connection over the simulated network, for asyncio protocols: the add port's bytes.

The add port's two ends are asyncio protocols (the bookie's ``AddPortConnection``, the client's
``FrameReader`` under a ``StreamWriter``). Here each end gets a transport of its own, and the two
talk over one :class:`~tests.sim.network.Connection`, so its faults are theirs:

* Bytes arrive in order, after the link's delay, cut into segments of random sizes: a frame may
  come a few bytes at a time, or several frames in one read.
* Flow control is a window: an end has at most ``window`` bytes on the way that its peer's
  protocol has not read; the rest waits in its write buffer, whose size its protocol sees
  (``pause_writing`` past the high-water mark, ``resume_writing`` at the low one). An end whose
  protocol paused reading leaves what arrived unread, so its peer's window closes, as a full
  socket buffer does.
* ``close`` sends what is buffered, then a FIN: the peer's protocol gets ``eof_received`` and its
  transport closes too unless that returned true. ``connection_lost(None)`` follows on each end
  once its side is closed. Bytes that reach an end closed for good reset the connection, as
  the RST a closed socket answers with.
* ``abort`` ends its own side at once (``connection_lost(None)``) and sends an RST if bytes the
  peer sent were left unread, else a FIN, as closing a socket does; an RST ends the peer's side
  with ``ConnectionResetError`` when it arrives (after what was sent before it). So a server that
  aborts a connection it just accepted (at its connection limit) is seen by the client as a
  connection opened, then ended or reset. ``close`` with unread bytes is an abort too.
* Any reset of the connection by the network (a crashed process, a partition past the keepalive)
  ends both sides at once, with ``ConnectionResetError``.

Opening (:func:`open_tcp`) takes a round trip: the server's protocol is made when the SYN
arrives, and the client's once the answer is back; a reset first is ``ConnectionRefusedError``.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from .network import Connection

# ``serving()``: whether the process at an end still runs (a crashed bookie reads and writes
# nothing more, though its connections end only when the reset reaches them).
Serving = Callable[[], bool]


@dataclass(frozen=True)
class TcpProfile:
    window: int  # bytes on the way, not yet read by the peer's protocol
    high_water: int  # write buffer: pause_writing above, resume_writing at or below low_water
    low_water: int


DEFAULT_TCP = TcpProfile(window=256 * 1024, high_water=64 * 1024, low_water=16 * 1024)
TIGHT_TCP = TcpProfile(window=1024, high_water=2048, low_water=512)  # a message or two deep


class SimTransport(asyncio.Transport):
    """One end of a simulated TCP connection, feeding an ``asyncio.BufferedProtocol``."""

    def __init__(
        self,
        conn: Connection,
        to_server: bool,
        protocol: asyncio.BufferedProtocol,
        profile: TcpProfile,
        rng: random.Random,
        peername: tuple[str, int],
        serving: Serving,
    ) -> None:
        super().__init__()
        self.peer: SimTransport | None = None
        self._conn = conn
        self._to_server = to_server  # the direction this end writes in
        self._protocol = protocol
        self._profile = profile
        self._rng = rng
        self._peername = peername
        self._serving = serving
        self._unsent: deque[memoryview] = deque()  # the write buffer
        self._unsent_bytes = 0
        self._on_the_way = 0  # sent, not yet read by the peer's protocol
        self._inbox: deque[memoryview] = deque()  # arrived, not yet read by this protocol
        self._eof_arrived = False
        self._reading_paused = False
        self._writing_paused = False
        self._closing = False  # close() or abort() called, or EOF taken without a half-close
        self._fin_sent = False
        self._lost = False  # connection_lost called
        self._loop = asyncio.get_running_loop()
        conn.on_reset(self._reset)

    # -- asyncio.Transport ---------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peername if name == "peername" else default  # no socket, no TLS

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def close(self) -> None:
        if self._closing or self._lost:
            return
        if self._inbox:  # a socket closed with unread bytes sends an RST, whatever it had to send
            self.abort()
            return
        self._closing = True
        self._pump()

    def abort(self) -> None:
        """Close now: what is buffered is dropped; the peer gets an RST if bytes it sent were
        left unread here, else a FIN (as closing a socket does)."""
        if self._lost:
            return
        self._closing = True
        self._unsent.clear()
        self._unsent_bytes = 0
        unread, self._fin_sent = bool(self._inbox), True  # later arrivals are answered with an RST
        self._inbox.clear()
        self._lose(None)
        if unread:
            self._send(lambda peer: peer._conn.reset("aborted"), "tcp rst")
        else:
            self._send(lambda peer: peer._arrive_eof(), "tcp fin")

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._lost or not data:
            return
        self._unsent.append(memoryview(bytes(data)))
        self._unsent_bytes += len(data)
        self._pump()
        if not self._writing_paused and self._unsent_bytes > self._profile.high_water:
            self._writing_paused = True
            self._protocol.pause_writing()

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self._loop.call_soon(self._feed)  # the socket is read on the loop's next poll

    def is_reading(self) -> bool:
        return not self._reading_paused and not self.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._unsent_bytes

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._profile.low_water, self._profile.high_water

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        raise NotImplementedError("the simulation's write buffer limits are its TcpProfile")

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- sending -------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Send what the window allows; then the FIN, once closing and all is sent."""
        if self._lost:
            return
        room = self._profile.window - self._on_the_way
        while self._unsent and room > 0:
            head = self._unsent[0]
            piece = head[:room]
            if len(piece) == len(head):
                self._unsent.popleft()
            else:
                self._unsent[0] = head[room:]
            room -= len(piece)
            self._on_the_way += len(piece)
            self._unsent_bytes -= len(piece)
            self._send(partial(SimTransport._arrive, data=piece), "tcp data")
        if self._writing_paused and self._unsent_bytes <= self._profile.low_water:
            self._writing_paused = False
            self._protocol.resume_writing()
        if self._closing and not self._unsent and not self._fin_sent:
            self._fin_sent = True
            self._send(lambda peer: peer._arrive_eof(), "tcp fin")
            self._lose(None)  # this side is closed: its socket is gone once the FIN is out

    def _send(self, deliver: Callable[[SimTransport], None], what: str) -> None:
        if not self._serving():
            return  # a crashed process sends nothing more

        def arrive() -> None:
            peer = self.peer
            if peer is not None and peer._serving():
                deliver(peer)

        self._conn.send(self._to_server, arrive, what)

    def _window_opened(self, nbytes: int) -> None:
        self._on_the_way -= nbytes
        self._pump()

    # -- receiving -----------------------------------------------------------------------------

    def _arrive(self, data: memoryview) -> None:
        if self._lost:
            if self._fin_sent:
                self._conn.reset("data for a closed socket")  # its host answers with RST
            return
        if self._closing:
            self._acknowledge(len(data))  # read and dropped: the peer's window moves on
            return
        self._inbox.append(data)
        self._feed()

    def _arrive_eof(self) -> None:
        self._eof_arrived = True
        self._feed()

    def _feed(self) -> None:
        """Hand what arrived to the protocol, in segments of random sizes, while it reads."""
        protocol = self._protocol
        while self._inbox and not self._reading_paused and not self.is_closing():
            data = self._inbox[0]
            segment = len(data) if self._rng.random() < 0.5 else self._rng.randint(1, len(data))
            buffer = memoryview(protocol.get_buffer(segment))
            n = min(len(buffer), segment)
            if not n:
                raise RuntimeError(f"{type(protocol).__name__}.get_buffer offered no room")
            buffer[:n] = data[:n]
            if n == len(data):
                self._inbox.popleft()
            else:
                self._inbox[0] = data[n:]
            self._acknowledge(n)
            protocol.buffer_updated(n)
        if self._eof_arrived and not self._inbox and not self._reading_paused and not self.is_closing():
            self._eof_arrived = False
            if not protocol.eof_received():
                self.close()

    def _acknowledge(self, nbytes: int) -> None:
        self._send(lambda peer: peer._window_opened(nbytes), "tcp window")

    # -- the end -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._closing = True
        self._unsent.clear()
        self._unsent_bytes = 0
        self._inbox.clear()
        self._lose(ConnectionResetError("connection reset"))

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._loop.call_soon(self._protocol.connection_lost, exc)
        peer = self.peer
        if peer is not None and peer._lost and self._conn.alive:
            self._conn.reset("closed")  # both sides closed: the connection is gone


Accept = Callable[[], "tuple[asyncio.BufferedProtocol, Serving] | None"]


async def open_tcp(
    conn: Connection,
    protocol: asyncio.BufferedProtocol,
    accept: Accept,
    profile: TcpProfile,
    rng: random.Random,
) -> SimTransport:
    """Open ``conn`` for ``protocol`` (the client's): ``accept`` runs on the server when the SYN
    arrives and gives the server's protocol and whether its process still runs, or None when
    nothing listens (the network resets such a connection). The server's protocol is told at
    once, the client's when the answer is back. Raises ``ConnectionRefusedError`` if the
    connection is reset first; a caller that gives up (a cancelled connect) resets it."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[SimTransport] = loop.create_future()

    def refused() -> None:
        if not opened.done():
            opened.set_exception(ConnectionRefusedError(f"connection to {conn.server} refused or reset"))

    def established(end: SimTransport) -> None:
        if not opened.done():
            protocol.connection_made(end)
            opened.set_result(end)

    def syn() -> None:
        accepted = accept()
        if accepted is None:
            return
        server_protocol, serving = accepted
        client_end = SimTransport(conn, True, protocol, profile, rng, (conn.server, 3181), lambda: True)
        server_end = SimTransport(
            conn, False, server_protocol, profile, rng, (conn.client, conn.cid), serving
        )
        client_end.peer, server_end.peer = server_end, client_end
        conn.send(False, lambda: established(client_end), "tcp syn-ack")
        server_protocol.connection_made(server_end)

    conn.on_reset(refused)
    conn.send(True, syn, "tcp syn")
    try:
        return await opened
    except asyncio.CancelledError:
        conn.reset("connect given up")  # the client's socket closes: the server's end goes too
        raise
