"""AddEntries over a bookie's add port (format and why: ``bkproto.add_port``), shaped like the
grpc.aio stream call the add stream otherwise uses: ``write``, ``read`` (``grpc.aio.EOF`` once the
bookie ended the stream) and ``cancel``. The same call carries a ReadStream (:data:`READ_STREAM`)
to a bookie that serves one there (its registration says so).

The connection opens in the background; the stream's first write and read wait for it. If the add
port cannot be reached (refused, filtered, timed out), this stream goes over gRPC instead, with a
warning: a bookie whose gRPC port answers must stay writable when only its add port is blocked.
The same holds for an add port that accepts the connection and then closes it before answering
anything (a bookie at its connections-per-IP limit, a proxy or firewall that resets): the stream
goes over gRPC, and the requests written so far are sent again there. Until the first answer the
call keeps them for that (at most the stream's window of messages, about one round trip); a
request sent twice is harmless, since an add of the same entry again stores the same bytes and a
read is a read. Once the add port has answered, a closed connection fails the stream as any broken
connection does. The next stream tries the add port again, so a bookie that was briefly down gets
it back (a caller that must know which transport ran, ``pybk bench bookie``, passes no gRPC call:
the stream then fails instead). A bookie that is down makes every add open a new stream, so each
warning is given once per outage (:class:`AddPortOutage`, one per bookie client), and again only
after the port answered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import grpc.aio

from bkproto import security as wire
from bkproto.add_port import FRAME_HEADER, PREFACE, READ_PREFACE, frame, keep_alive
from bkproto.errors import BookieUnavailableError
from bkproto.v1 import bookie_pb2

from .frame_reader import Frame, FrameConnector, FrameReader, open_frame_connection
from .tls import ClientSecurity

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
_CLOSE_WAIT_S = 1.0  # for a broken connection's close to be reported (it already was, or comes next)


class PortStream(NamedTuple):
    """Which stream a connection to the add port carries."""

    name: str
    preface: bytes
    auth_preface: bytes  # followed by the token's frame
    parse: Callable[[Frame], Any]  # a bookie's frame into its answer


def _add_answer(frame: Frame) -> bookie_pb2.AddEntriesResponse:
    # protobuf parses any buffer (a large frame is a bytearray); its stubs say bytes
    return bookie_pb2.AddEntriesResponse.FromString(cast(bytes, frame))


def _read_answer(frame: Frame) -> bookie_pb2.ReadStreamResponse:
    return bookie_pb2.ReadStreamResponse.FromString(cast(bytes, frame))


ADD_STREAM = PortStream("add", PREFACE, wire.AUTH_PREFACE, _add_answer)
READ_STREAM = PortStream("read", READ_PREFACE, wire.READ_AUTH_PREFACE, _read_answer)


class ClosedBeforeAnswering(ConnectionResetError):
    """The add port closed the connection before answering anything, and the stream had no gRPC
    call to go on with (``pybk bench bookie``): a bookie at its connection limit, or a port that
    is not a bookie's add port."""


class AddPortOutage:
    """Whether one bookie's add port was found unreachable, or closing its connections before
    answering, and has not answered since: the streams that follow are then only logged at debug
    level."""

    __slots__ = ("unanswering", "unreachable")

    def __init__(self) -> None:
        self.unreachable = False
        self.unanswering = False


class AddPortCall:
    def __init__(
        self,
        bookie_id: str,
        target: str,
        grpc_call: Callable[[], Any] | None,
        outage: AddPortOutage | None = None,
        security: ClientSecurity | None = None,
        stream: PortStream = ADD_STREAM,
        connect: FrameConnector = open_frame_connection,
    ) -> None:
        """``target`` is the add port's ``host:port``; ``grpc_call`` opens the gRPC call of the
        same stream (whose ``write`` takes serialized requests) to use if it cannot be reached
        (None: the stream then fails, BookieUnavailableError); ``outage`` is shared by the
        bookie's streams; ``security`` TLS and the token, as on gRPC; ``connect`` opens the
        connection."""
        self._stream = stream
        self._connect_frames = connect
        self._bookie_id = bookie_id
        self._security = security
        self._target = target
        self._grpc_call = grpc_call
        self._outage = outage or AddPortOutage()
        self._reader: FrameReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.fallback: Any = None  # the gRPC call, once the add port proved unreachable
        # The framed requests written over the add port until its first answer, to send again
        # over gRPC if it closes before answering (None: answered, or no gRPC call to use).
        self._unanswered: list[bytes] | None = [] if grpc_call is not None else None
        self._resent: asyncio.Future[None] | None = None  # the sending of those over gRPC
        self._answered = False
        self._cancelled = False
        self._ready = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        host, _, port = self._target.rpartition(":")
        try:
            security = self._security
            ssl = security.ssl_context if security is not None and security.tls else None
            reader, writer = await asyncio.wait_for(
                self._connect_frames(host.strip("[]"), int(port), ssl), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            if self._grpc_call is None:
                why = exc or type(exc).__name__
                raise BookieUnavailableError(
                    f"bookie {self._bookie_id}: add port {self._target} unreachable ({why})"
                ) from exc
            level = logging.DEBUG if self._outage.unreachable else logging.WARNING
            self._outage.unreachable = True
            log.log(
                level, "bookie %s: add port %s unreachable (%s); this %s stream goes over gRPC",
                self._bookie_id, self._target, exc or type(exc).__name__, self._stream.name,
            )
            self.fallback = self._grpc_call()
            return
        if self._outage.unreachable:
            self._outage.unreachable = False
            log.info("bookie %s: add port %s reachable again", self._bookie_id, self._target)
        token = self._security.token if self._security is not None else None
        preface = self._stream.preface if token is None else self._stream.auth_preface + frame(token.encode())
        # Reset as soon as accepted (a bookie at its connections per IP), uvloop's closed transport
        # raises a RuntimeError, a closed socket an OSError: the reader reports the loss, and the
        # stream goes over gRPC or fails with it.
        with contextlib.suppress(OSError, RuntimeError):
            keep_alive(writer.get_extra_info("socket"))
            writer.write(preface)
        self._reader, self._writer = reader, writer

    async def write(self, message: bytes) -> None:
        """Send one serialized request; waits while the socket's buffer is full."""
        await self.write_framed(frame(message))

    async def write_framed(self, framed: bytes) -> None:
        """:meth:`write` of a message that already has its length header (the add stream builds
        it in the same copy as the message: ``AddRequestEncoder.pack``)."""
        await self._connected()
        if self.fallback is not None:
            await self._write_over_grpc(framed)
            return
        writer = self._writer
        assert writer is not None
        if self._unanswered is not None:
            self._unanswered.append(framed)
        try:
            if writer.transport.is_closing():
                # asyncio's transport would drop the bytes and drain() raise; uvloop's raises a
                # RuntimeError on write: both are this error here.
                raise ConnectionResetError(f"bookie {self._bookie_id}: add port connection closed")
            try:
                writer.write(framed)
            except RuntimeError as exc:  # uvloop's, closed by a reset it has not shown as closing
                raise ConnectionResetError(f"bookie {self._bookie_id}: add port connection closed") from exc
            await writer.drain()
        except OSError as exc:
            await self._take_close_error()
            if self._fall_back(exc) is None:
                raise self._unanswered_error(exc) from exc
            await self._write_over_grpc(None)  # this request is among those sent again

    async def _write_over_grpc(self, framed: bytes | None) -> None:
        """After the requests sent again (in order, before any later one), ``framed``."""
        if self._resent is not None:
            await asyncio.shield(self._resent)  # a cancelled write must not cancel the others'
        if framed is not None:
            await self.fallback.write(framed[FRAME_HEADER.size :])

    def ready_to_write(self) -> bool:
        """Whether :meth:`write` would not wait: connected over the add port, the socket open and
        its buffer below the high-water mark. Then :meth:`write_nowait` sends in this step."""
        writer = self._writer
        if writer is None or self.fallback is not None:
            return False
        transport = writer.transport
        return not transport.is_closing() and (
            transport.get_write_buffer_size() <= transport.get_write_buffer_limits()[1]
        )

    def write_nowait(self, message: bytes) -> None:
        """:meth:`write` in this step; only when :meth:`ready_to_write` said so."""
        self.write_framed_nowait(frame(message))

    def write_framed_nowait(self, framed: bytes) -> None:
        """:meth:`write_framed` in this step; only when :meth:`ready_to_write` said so."""
        assert self._writer is not None
        if self._unanswered is not None:
            self._unanswered.append(framed)
        try:  # noqa: SIM105 - not contextlib.suppress: this runs for every message
            self._writer.write(framed)
        except RuntimeError:
            # uvloop's transport, closed by a reset it has not shown as closing: the connection's
            # reader reports the loss, and the stream goes over gRPC (this request among those
            # sent again) or fails with it.
            pass

    async def read(self) -> Any:
        """The bookie's next answer, or ``grpc.aio.EOF`` once it closed the stream."""
        await self._connected()
        if self.fallback is not None:
            return await self.fallback.read()
        assert self._reader is not None
        try:
            message = await self._reader.read_frame()
        except OSError as exc:
            await self._take_close_error()
            if (fallback := self._fall_back(exc)) is None:
                raise self._unanswered_error(exc) from exc
            return await fallback.read()
        if message is None:
            if (fallback := self._fall_back(None)) is not None:
                return await fallback.read()
            return grpc.aio.EOF  # type: ignore[attr-defined]
        if self.fallback is not None:
            # The writer found the connection closed first and fell back while this answer was
            # on its way: its request was sent again with the others, and gRPC answers it.
            return await self.fallback.read()
        self._answered = True
        if self._unanswered is not None:
            self._unanswered = None  # answered: from now on a closed connection fails the stream
            if self._outage.unanswering:
                self._outage.unanswering = False
                log.info("bookie %s: add port %s answering again", self._bookie_id, self._target)
        return self._stream.parse(message)

    def _unanswered_error(self, error: OSError) -> OSError:
        """The error a closed connection fails the stream with: its own, or, before any answer,
        one that says so."""
        if self._answered or self._cancelled:
            return error
        why = f"add port {self._target} closed the connection before answering ({error})"
        return ClosedBeforeAnswering(f"bookie {self._bookie_id}: {why}")

    def _fall_back(self, error: OSError | None) -> Any:
        """The add port closed the connection (``error``, or None at its end): if it had not
        answered yet, this stream goes over gRPC from now on, the requests written so far sent
        again there first. The gRPC call, or None if the stream does not fall back."""
        if self.fallback is not None:
            return self.fallback  # the other direction found it first
        unanswered = self._unanswered
        if unanswered is None or self._cancelled:
            return None
        assert self._grpc_call is not None  # (no gRPC call: nothing is kept)
        self._unanswered = None
        if self._writer is not None:
            # Closed by the peer's FIN, the socket may stay open for ever (a vanished host): a
            # write waiting for room in it must not wait with it.
            self._writer.transport.abort()
        level = logging.DEBUG if self._outage.unanswering else logging.WARNING
        self._outage.unanswering = True
        log.log(
            level, "bookie %s: add port %s closed the connection before answering (%s); this %s stream"
            " goes over gRPC", self._bookie_id, self._target, error or "end of stream", self._stream.name,
        )  # fmt: skip
        self.fallback = fallback = self._grpc_call()

        async def send_again() -> None:
            for framed in unanswered:
                await fallback.write(framed[FRAME_HEADER.size :])

        self._resent = resent = asyncio.ensure_future(send_again())
        # Its failure (the gRPC call failing too) reaches a later write, or no one: the stream's
        # read fails the same way. Taken here, it is not reported as never retrieved.
        resent.add_done_callback(lambda done: done.cancelled() or done.exception())
        return fallback

    async def _take_close_error(self) -> None:
        """After the connection broke (a reset bookie): asyncio's stream leaves the same error on
        its close future too, and if nothing awaits that, the garbage collector may report it as
        "Future exception was never retrieved", a traceback in the client's log for an error the
        stream already handled. So it is taken here (the caller raises it anyway)."""
        assert self._writer is not None
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), _CLOSE_WAIT_S)

    async def _connected(self) -> None:
        if not self._ready.done():
            await asyncio.shield(self._ready)  # a cancelled write must not cancel the connecting
        self._ready.result()  # a connect that failed otherwise than unreachable fails the stream

    def cancel(self) -> None:
        self._cancelled = True
        self._ready.cancel()
        if self._resent is not None:
            self._resent.cancel()
        if self.fallback is not None:
            self.fallback.cancel()
        if self._writer is not None:
            self._writer.close()
