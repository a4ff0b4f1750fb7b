"""The bookie's add port: the AddEntries stream over plain TCP (format and why: ``bkproto.add_port``).

Each connection is one add stream served by the same :class:`AddEntriesHandler` as the gRPC
method, so pipelining, the stream window, the in-progress byte budget and shutdown draining are
shared, not duplicated. Backpressure is TCP's own: a stream at its window stops reading its
socket, and answers are written only as fast as the client takes them (``drain``).

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
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from google.protobuf.message import DecodeError

from bkproto import security as wire
from bkproto.add_port import (
    FRAME_HEADER,
    MAX_FRAME_BYTES,
    PREFACE,
    FrameError,
    frame,
    keep_alive,
    read_body,
    read_frame,
    read_preface,
)
from bookie.handlers.add_entries import (
    AddEntriesHandler,
    SizedAddEntriesRequest,
    TooManyAdds,
    parse_add_entries,
)
from bookie.limits import (
    ConnectionCounter,
    ListenerLimits,
    PeerByteBudget,
    QuietLog,
    peer_host,
)
from bookie.security import BookieSecurity, Right, refused_add_response
from bookie.stats import RequestStats

log = logging.getLogger(__name__)

# A connection must say what it is this soon, or it is closed: idle sockets must not pile up.
PREFACE_TIMEOUT_S = 10.0
LISTENER = "add_port"  # the ``listener`` label of the limit metrics

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
    ) -> None:
        self._handler = handler
        self._security = security
        self._bind_address = bind_address
        self._requested_port = port
        self._limits = limits = limits or ListenerLimits()
        self._decode = decode
        self._limit_stats = stats.limits
        self._counter = ConnectionCounter(limits.max_connections, limits.max_connections_per_peer)
        self._receiving = PeerByteBudget(limits.max_buffered_bytes, limits.max_buffered_bytes_per_peer)
        self._max_frame_bytes = min(MAX_FRAME_BYTES, limits.max_buffered_bytes_per_peer)
        self._quiet = QuietLog(log)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        stats.add_port_connections = lambda: self.open_connections  # read by metrics scrapes

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        target = f"{self._bind_address}:{self._requested_port}"
        try:
            ssl = self._security.ssl_context if self._security is not None else None
            self._server = await asyncio.start_server(
                self._serve, self._bind_address, self._requested_port, ssl=ssl,
                # a peer that never completes the handshake is dropped as one that never says hello
                ssl_handshake_timeout=PREFACE_TIMEOUT_S if ssl is not None else None,
            )
        except OSError as exc:
            raise OSError(f"cannot listen on {target} (add port): {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop listening and close every connection still open."""
        self.stop_accepting()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = peer_host(peer)
        refused = self._counter.admit(host)
        if refused is not None:
            self._limit_stats.hit(LISTENER, refused)
            self._quiet.warning("add port: refused a connection from %s: too many %s", peer, refused)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        keep_alive(writer.get_extra_info("socket"))
        deadline = FrameDeadline(self._limits.frame_timeout_s)
        try:
            try:
                refusal = await asyncio.wait_for(self._authenticate(reader, writer), PREFACE_TIMEOUT_S)
            except TimeoutError:
                raise FrameError(f"no preface within {PREFACE_TIMEOUT_S:g} s") from None
            if refusal is not None:
                await self._refuse(reader, writer, peer, host, refusal, deadline)
                return
            responses = self._handler.serve(self._requests(reader, peer, host, deadline), host)
            async with contextlib.aclosing(responses):
                async for response in responses:
                    writer.write(frame(response.SerializeToString()))
                    await self._drain(writer)
        except FrameError as exc:
            self._quiet.warning("add port: closing the connection from %s: %s", peer, exc)
            # Not close(): that first flushes the answers still buffered, which a peer that does
            # not read would hold open (with their memory) for ever.
            writer.transport.abort()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("add port: connection from %s ended: %r", peer, exc)
        finally:
            deadline.close()
            self._connections.discard(task)
            self._counter.release(host)
            writer.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """Read the preface (and token); why the caller may not add, or None when it may."""
        preface = await read_preface(reader, (PREFACE, wire.AUTH_PREFACE))
        token = None
        if preface == wire.AUTH_PREFACE:
            raw = await read_frame(reader, wire.MAX_TOKEN_BYTES)
            token = raw.decode("utf-8", "replace") if raw is not None else None
        if self._security is None or not self._security.guard.required:
            return None
        guard = self._security.guard
        identity = guard.identify(wire.common_name(writer.get_extra_info("peercert")), token)
        return guard.refusal("add", identity, Right.WRITE)

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: object,
        host: str,
        why: str,
        deadline: FrameDeadline,
    ) -> None:
        """Answer every add of the connection with EUA (as BookKeeper does before authentication),
        under the same limits as the adds of an authenticated caller."""
        log.info("add port: refusing the adds of %s: %s", peer, why)
        while True:
            try:
                first = await reader.readexactly(1)
            except asyncio.IncompleteReadError:
                return
            length, message = await self._frame_after(reader, first, host, deadline)
            try:
                request = self._decode(message).request
                writer.write(frame(refused_add_response(request, why).SerializeToString()))
            except DecodeError as exc:
                raise FrameError(f"a message that does not parse: {exc}") from None
            finally:
                self._receiving.release(host, length)
            await self._drain(writer)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        """Wait until the peer takes its answers, for at most the write timeout."""
        if writer.transport.get_write_buffer_size() <= writer.transport.get_write_buffer_limits()[1]:
            return  # below the high-water mark: drain() would not wait
        try:
            await asyncio.wait_for(writer.drain(), self._limits.write_timeout_s)
        except TimeoutError:
            self._limit_stats.hit(LISTENER, "write_timeout")
            raise FrameError(f"answers left unread for {self._limits.write_timeout_s:g} s") from None

    async def _requests(
        self, reader: asyncio.StreamReader, peer: object, host: str, deadline: FrameDeadline
    ) -> AsyncIterator[SizedAddEntriesRequest]:
        """The client's messages until it closes; a fault is logged here (the handler's reader would
        only see the stream end) and ends the stream. A frame's bytes stay reserved until the add
        stream asks for the next message, that is until it has taken this one on."""
        receiving = self._receiving
        reserved = 0
        try:
            while True:
                try:
                    first = await reader.readexactly(1)  # idle between frames as long as it likes
                except asyncio.IncompleteReadError:
                    return
                length, message = await self._frame_after(reader, first, host, deadline)
                reserved = length
                try:
                    request = self._decode(message)
                except TooManyAdds:
                    self._limit_stats.hit(LISTENER, "adds_per_message")
                    raise
                del message
                yield request
                receiving.release(host, reserved)
                reserved = 0
        except (FrameError, DecodeError) as exc:
            self._quiet.warning("add port: ending the stream from %s: %s", peer, exc or type(exc).__name__)
            raise
        finally:
            if reserved:
                receiving.release(host, reserved)

    async def _frame_after(
        self, reader: asyncio.StreamReader, first: bytes, host: str, deadline: FrameDeadline
    ) -> tuple[int, bytes | bytearray]:
        """The rest of a frame whose first byte has arrived: (its length, its message), with the
        length reserved in the receive budget (released by the caller)."""
        reserved = 0
        deadline.frame_started()
        try:
            (length,) = FRAME_HEADER.unpack(first + await reader.readexactly(FRAME_HEADER.size - 1))
            if length > self._max_frame_bytes:
                self._limit_stats.hit(LISTENER, "frame_bytes")
                limit = self._max_frame_bytes
                raise FrameError(f"frame of {length} bytes exceeds the {limit}-byte limit")
            await self._receiving.acquire(host, length)
            reserved = length
            message = await read_body(reader, length)
        except asyncio.CancelledError:
            if reserved:
                self._receiving.release(host, reserved)
            if not deadline.expired():
                raise
            self._limit_stats.hit(LISTENER, "frame_timeout")
            raise FrameError(f"a frame not received whole within {deadline.timeout_s:g} s") from None
        except BaseException:
            if reserved:
                self._receiving.release(host, reserved)
            raise
        finally:
            deadline.frame_ended()
        return length, message


class FrameDeadline:
    """A connection's frame timeout: a frame must arrive whole within ``timeout_s`` of its first
    byte. One timer per connection, re-armed only when it fires, instead of a timeout context
    per frame (its timer handle, scheduled and cancelled per message, was a visible share of a
    bookie's CPU at a message per add). When the timer finds a frame older than the timeout, it
    cancels the task reading it, which turns the cancellation into :class:`FrameError`."""

    __slots__ = ("_expired", "_handle", "_loop", "_reading", "_started", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._started: float | None = None  # loop time of the current frame's first byte
        self._reading: asyncio.Task[object] | None = None
        self._expired = False
        self._handle = self._loop.call_later(timeout_s, self._check)

    def frame_started(self) -> None:
        self._started = self._loop.time()
        self._reading = asyncio.current_task()

    def frame_ended(self) -> None:
        self._started = None
        self._reading = None

    def expired(self) -> bool:
        """Whether the cancellation the reading task got came from this deadline (and is
        withdrawn: the task goes on, to end the stream)."""
        if not self._expired:
            return False
        self._expired = False
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True

    def _check(self) -> None:
        started, now = self._started, self._loop.time()
        if started is None or now < started + self.timeout_s:
            # A frame that starts later expires no sooner than a timeout from now.
            when = now + self.timeout_s if started is None else started + self.timeout_s
            self._handle = self._loop.call_at(when, self._check)
            return
        if self._reading is not None:
            self._expired = True
            self._reading.cancel()
        self._handle = self._loop.call_at(now + self.timeout_s, self._check)

    def close(self) -> None:
        self._handle.cancel()
