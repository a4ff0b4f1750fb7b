"""The bookie's add port: the AddEntries stream over plain TCP (format and why: ``bkproto.add_port``),
and the ReadStream of tailing readers (``bookie.read_port``).

Each connection is one add stream of the same :class:`AddEntriesHandler` as the gRPC method, so
the batch processing, the stream window, the byte budgets and shutdown draining are shared, not
duplicated. A connection (``bookie.add_port_connection``) is a protocol, not a task: frames are
received into its own buffer and started in the step that received them, and answers are written
from the steps that finish the batches. Backpressure is TCP's own: a stream at its window stops
reading its socket, and answers are written only as fast as the client takes them.

With TLS (``bookie.security``) the socket is wrapped from the first byte; with authentication on,
the caller's identity comes from its certificate or from the token frame after the authenticating
preface (``bkproto.security``), and a caller without the write right gets EUA for every add.

A connection that breaks the format (wrong preface, oversized frame, a message that does not
parse) is closed with a warning naming the peer and the fault; other connections carry on.

Limits (``bookie.limits``): connections in total and per IP address (one over is closed at once);
a frame's bytes are reserved in the receive budget, in total and per IP address, from its length
header until the add stream has taken the message; a frame must arrive whole within the frame
timeout once its first byte has (a silent or dribbling sender is closed, an idle one between
frames is not); a peer that leaves its answers unread for the write timeout is closed. Each closure
is logged (at most one line every few seconds) and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bkproto.add_port import MAX_FRAME_BYTES
from bookie.add_port_connection import LISTENER, AddPortConnection, PortContext, log
from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest, parse_add_entries
from bookie.handlers.read_stream import ReadStreamHandler
from bookie.limits import ConnectionCounter, ListenerLimits, PeerByteBudget, QuietLog
from bookie.security import BookieSecurity
from bookie.stats import RequestStats

__all__ = ["LISTENER", "PREFACE_TIMEOUT_S", "AddPortServer"]

# A connection must say what it is this soon, or it is closed: idle sockets must not pile up.
PREFACE_TIMEOUT_S = 10.0

Decoder = Callable[[bytes | bytearray], SizedAddEntriesRequest]


class AddPortServer:
    """Listens on the add port. ``start()`` binds and serves; ``stop_accepting()`` then
    ``close()`` end it (the handler's own drain answers the started batches in between)."""

    def __init__(
        self,
        handler: AddEntriesHandler,
        stats: RequestStats,
        bind_address: str,
        port: int,
        limits: ListenerLimits | None = None,
        decode: Decoder = parse_add_entries,
        security: BookieSecurity | None = None,
        reads: ReadStreamHandler | None = None,
        fault_log: QuietLog | None = None,
    ) -> None:
        """``reads`` serves the connections that open with the read preface (None: they are
        refused as a wrong preface); ``fault_log`` is told of every connection closed or stream
        ended for a fault (by default the add port's log, quietened)."""
        self._security = security
        self._bind_address = bind_address
        self._requested_port = port
        limits = limits or ListenerLimits()
        self._receiving = PeerByteBudget(limits.max_buffered_bytes, limits.max_buffered_bytes_per_peer)
        self._connections: set[AddPortConnection] = set()
        self._context = PortContext(
            handler=handler,
            security=security,
            decode=decode,
            limit_stats=stats.limits,
            counter=ConnectionCounter(limits.max_connections, limits.max_connections_per_peer),
            receiving=self._receiving,
            max_frame_bytes=min(MAX_FRAME_BYTES, limits.max_buffered_bytes_per_peer),
            frame_timeout_s=limits.frame_timeout_s,
            write_timeout_s=limits.write_timeout_s,
            quiet=fault_log or QuietLog(log),
            connections=self._connections,
            reads=reads,
        )
        self._server: asyncio.Server | None = None
        self.port = 0
        stats.add_port_connections = lambda: self.open_connections  # read by metrics scrapes

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        target = f"{self._bind_address}:{self._requested_port}"
        loop = asyncio.get_running_loop()
        try:
            ssl = self._security.ssl_context if self._security is not None else None
            self._server = await loop.create_server(
                self.new_connection, self._bind_address, self._requested_port, ssl=ssl,
                # a peer that never completes the handshake is dropped as one that never says hello
                ssl_handshake_timeout=PREFACE_TIMEOUT_S if ssl is not None else None,
            )
        except OSError as exc:
            raise OSError(f"cannot listen on {target} (add port): {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def new_connection(self) -> AddPortConnection:
        """The protocol of one accepted connection (the listener's factory; the simulation
        gives it a transport of its own)."""
        return AddPortConnection(self._context, PREFACE_TIMEOUT_S)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop listening and close every connection still open."""
        self.stop_accepting()
        for connection in list(self._connections):
            connection.close()
        for _ in range(8):  # their connection_lost runs a loop turn or two later (TLS: two)
            if not self._connections:
                break
            await asyncio.sleep(0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def buffered_bytes(self) -> int:
        """Bytes reserved for frames being received now."""
        return self._receiving.used

    @property
    def receive_budget(self) -> PeerByteBudget:
        """The budget those bytes are reserved in (who holds it, who waits)."""
        return self._receiving
