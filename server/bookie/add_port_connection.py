"""One add-port connection: frames received into a buffer the connection owns and answered from
the batches' completion, without a stream reader, a task or an async generator per message.

At a message per add (a writer below a few thousand entries/s) every event-loop turn and
coroutine on a message's way is a visible share of a bookie's CPU (docs/cost-model.md, "A message
per add"). So the connection is an :class:`asyncio.BufferedProtocol`: the transport receives
straight into the connection's buffer (a large frame straight into a buffer of the frame's size),
each complete frame is decoded and offered to the stream's :class:`AddPipeline` in the step that
received its last byte, and the pipeline hands the answers back, in request order, from the steps
that finish the batches.

Backpressure without a task to wait in: the connection stops reading its socket while the
stream's window or byte budgets have no room for the message it holds (the pipeline says when
they do), while a frame's bytes do not fit in the receive budget (the budget says when they may),
and while its peer leaves answers unread (the transport's ``pause_writing``; the answers wait in
the pipeline). The limits are those of ``bookie.add_port``'s docstring.

A connection that opens with the read preface carries a ReadStream instead
(``bookie.read_port``): the same frames, limits and authentication, its requests offered to a
:class:`~bookie.read_port.ReadPortPipeline`, at most ``MAX_READ_REQUEST_BYTES`` each, and the
READ right needed where the add stream needs WRITE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from google.protobuf.message import DecodeError, Message

from bkproto import security as wire
from bkproto.add_port import FRAME_HEADER, MAX_READ_REQUEST_BYTES, PREFACE, READ_PREFACE, frame, keep_alive
from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage
from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest, TooManyAdds
from bookie.handlers.read_stream import ReadStreamHandler, refusal
from bookie.limits import ConnectionCounter, LimitStats, PeerByteBudget, QuietLog, Reservation, peer_host
from bookie.read_port import ReadPortPipeline, fencing_refusal
from bookie.security import BookieSecurity, Right, refused_add_response

log = logging.getLogger("bookie.add_port")  # one logger for the add port, whatever the module

LISTENER = "add_port"  # the ``listener`` label of the limit metrics
# A frame's message up to this size is gathered in the connection's buffer; a larger one is
# received straight into a buffer of its own size (no copy of the whole message on the way).
_GATHERED_BYTES = 64 * 1024
_BUFFER_BYTES = 16 * 1024  # the buffer an idle connection keeps (a lone add's frame fits)
# An answer with a head (a batched read's) whose data is this large goes out in two writes rather
# than one copy of it all; a smaller one is copied (a write is a system call).
_WRITE_APART_BYTES = 64 * 1024
_MIN_READ_BYTES = 4096  # the least room offered to a read
_HEADER = FRAME_HEADER.size
_PREFACE_BYTES = len(PREFACE)
_PREFACE, _TOKEN, _FRAMES = range(3)  # what the connection expects next
_ADD_PREFACES = (PREFACE, wire.AUTH_PREFACE)
_READ_PREFACES = (READ_PREFACE, wire.READ_AUTH_PREFACE)
_AUTH_PREFACES = (wire.AUTH_PREFACE, wire.READ_AUTH_PREFACE)


class _Pipeline(Protocol):
    """What the connection drives: an add stream's ``AddPipeline`` or a ``ReadPortPipeline``."""

    @property
    def idle(self) -> bool: ...

    def offer(self, request: Any) -> bool: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PortContext:
    """What every connection of the add port shares (built by ``AddPortServer``)."""

    handler: AddEntriesHandler
    security: BookieSecurity | None
    decode: Callable[[bytes | bytearray], SizedAddEntriesRequest]
    limit_stats: LimitStats
    counter: ConnectionCounter
    receiving: PeerByteBudget
    max_frame_bytes: int
    frame_timeout_s: float
    write_timeout_s: float
    quiet: QuietLog
    connections: set[AddPortConnection]
    reads: ReadStreamHandler | None = None  # serves read connections (None: refuses them)


class AddPortConnection(asyncio.BufferedProtocol):
    def __init__(self, context: PortContext, preface_timeout_s: float) -> None:
        self._c = context
        self._preface_timeout_s = preface_timeout_s
        self._transport: asyncio.Transport | None = None
        self._peer: object = None
        self._host = ""
        self._admitted = False
        self._stage = _PREFACE
        self._buf = bytearray(_BUFFER_BYTES)
        self._start = 0  # unread bytes of the buffer: [_start, _end)
        self._end = 0
        self._frame_bytes = -1  # the current frame's message length once its header is read
        self._body: bytearray | None = None  # a large frame's message, received in place
        self._body_got = 0
        self._reserved = 0  # receive-budget bytes held for the current frame or ``_held``
        self._queued: Reservation | None = None  # the next frame's bytes, waiting in the budget
        self._held: SizedAddEntriesRequest | bookie_pb2.ReadStreamRequest | None = None  # not yet taken
        self._refusal: str | None = None  # why every request is answered EUA (authentication)
        self._pipeline: _Pipeline | None = None
        self._reads = False  # a ReadStream connection (the read preface)
        self._max_frame_bytes = context.max_frame_bytes
        self._ended = False  # no more frames are read (EOF, a fault, shutdown)
        self._write_paused = False
        self._reading_paused = False
        self._closed = False
        self._frame_started: float | None = None  # loop time of the current frame's first byte
        self._timer: asyncio.TimerHandle | None = None  # preface, then frame timeout
        self._write_timer: asyncio.TimerHandle | None = None

    # ---- transport events -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's transport: asyncio's, or uvloop's, which is not an asyncio.Transport.
        self._transport = transport = cast(asyncio.Transport, transport)
        self._peer = peer = transport.get_extra_info("peername")
        self._host = host = peer_host(peer)
        c = self._c
        refused = c.counter.admit(host)
        if refused is not None:
            c.limit_stats.hit(LISTENER, refused)
            c.quiet.warning("add port: refused a connection from %s: too many %s", peer, refused)
            self._closed = True
            transport.abort()
            return
        self._admitted = True
        c.connections.add(self)
        keep_alive(transport.get_extra_info("socket"))
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._preface_timeout_s, self._preface_timed_out)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._body_got :]
        buf, start, end = self._buf, self._start, self._end
        if start == end:
            self._start = self._end = start = end = 0
            if len(buf) > _BUFFER_BYTES and self._frame_bytes < 0:
                self._buf = buf = bytearray(_BUFFER_BYTES)  # a big small frame came and went
        wanted = max(_MIN_READ_BYTES, self._frame_bytes - (end - start))
        if len(buf) - end < wanted:
            kept = end - start
            if len(buf) - kept >= wanted:
                buf[:kept] = buf[start:end]  # same length: no resize (a read's view may be alive)
            else:
                grown = bytearray(kept + wanted)
                grown[:kept] = buf[start:end]
                self._buf = buf = grown
            self._start, self._end = 0, kept
            end = kept
        return memoryview(buf)[end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_got += nbytes
        else:
            self._end += nbytes
        if not self._closed:
            self._read_frames()

    def eof_received(self) -> bool:
        if self._stage != _FRAMES:
            self._fail(f"connection closed after {self._end - self._start} bytes of the preface")
            return False
        if self._frame_started is not None:
            log.debug("add port: connection from %s ended inside a frame", self._peer)
        self._end_reading()
        # Keep the connection open to write the answers still due (TLS cannot half-close).
        return self._transport is not None and self._transport.get_extra_info("sslcontext") is None

    def pause_writing(self) -> None:
        self._write_paused = True
        loop = asyncio.get_running_loop()
        self._write_timer = loop.call_later(self._c.write_timeout_s, self._write_timed_out)

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._pipeline is not None:
            self._pipeline.flush()
        if self._refusal is not None or self._reads:
            self._resume()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("add port: connection from %s ended: %r", self._peer, exc)
        self._closed = True
        self._ended = True
        for timer in (self._timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._write_timer = None
        self._cancel_queued()
        self._release_reservation()
        self._held = None
        self._body = None
        if self._pipeline is not None:
            self._pipeline.close()
        if self._admitted:
            self._admitted = False
            self._c.connections.discard(self)
            self._c.counter.release(self._host)

    # ---- the stream's carrier (AddStreamCarrier) -------------------------------------------

    def write_answer(self, response: Message | EncodedMessage) -> bool:
        transport = self._transport
        assert transport is not None
        if transport.is_closing():
            # Closed by this side, its connection_lost not yet called: the answer has nowhere to
            # go (asyncio's transport would drop it; uvloop's raises).
            return True
        if isinstance(response, EncodedMessage) and len(response.data) >= _WRITE_APART_BYTES:
            # A batched read's answer, a megabyte or so: its frame header and head go first, then
            # its data as it is, rather than a copy of it all with the header in front.
            head = response.head
            transport.write(FRAME_HEADER.pack(len(head) + len(response.data)) + head)
            transport.write(response.data)
        else:
            transport.write(frame(response.SerializeToString()))
        return not self._write_paused  # write() calls pause_writing past the high-water mark

    def room(self) -> None:
        self._resume()

    def answered_all(self) -> None:
        self._finish_if_done()

    def stop_reading(self) -> None:
        """Shutdown: frames not yet taken are dropped; the started batches are answered."""
        self._held = None
        self._release_reservation()
        self._end_reading()

    def broken(self, why: str) -> None:
        self._fail(why)

    def close(self) -> None:
        """Close now, answers unsent or not (the add port is closing)."""
        if self._transport is not None and not self._closed:
            self._transport.abort()

    # ---- reading ---------------------------------------------------------------------------

    def _read_frames(self) -> None:
        """Take every complete frame in the buffer, until one is held back or the data runs out."""
        while not self._ended and self._held is None:
            if self._write_paused and (self._refusal is not None or self._reads):
                self._pause_reading()  # answered in the step: no more frames until the peer reads
                return
            if self._stage == _FRAMES:
                message = self._next_message()
                if message is None:
                    return
                self._take(message)
            elif not self._read_preface():
                return
        if self._held is not None and not self._reading_paused:
            self._pause_reading()

    def _read_preface(self) -> bool:
        """The preface, then (authenticating preface) the token frame; whether it progressed."""
        start, available = self._start, self._end - self._start
        if self._stage == _PREFACE:
            if available < _PREFACE_BYTES:
                return False
            got = bytes(self._buf[start : start + _PREFACE_BYTES])
            if got in _READ_PREFACES and self._c.reads is not None:
                self._reads = True
                self._max_frame_bytes = min(self._max_frame_bytes, MAX_READ_REQUEST_BYTES)
            elif got not in _ADD_PREFACES:
                self._fail(f"expected the add-port preface {PREFACE!r}, got {got!r}")
                return False
            self._start += _PREFACE_BYTES
            if got in _AUTH_PREFACES:
                self._stage = _TOKEN
                return True
            self._begin_stream(None)
            return True
        if available < _HEADER:
            return False
        (length,) = FRAME_HEADER.unpack_from(self._buf, start)
        if length > wire.MAX_TOKEN_BYTES:
            self._fail(f"frame of {length} bytes exceeds the {wire.MAX_TOKEN_BYTES}-byte limit")
            return False
        if available < _HEADER + length:
            return False
        token = bytes(self._buf[start + _HEADER : start + _HEADER + length]).decode("utf-8", "replace")
        self._start += _HEADER + length
        self._begin_stream(token)
        return True

    def _begin_stream(self, token: str | None) -> None:
        """The preface is in: authenticate, then serve adds or reads (or refuse each with EUA)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._stage = _FRAMES
        security = self._c.security
        if security is not None and security.guard.required:
            assert self._transport is not None
            guard = security.guard
            identity = guard.identify(wire.common_name(self._transport.get_extra_info("peercert")), token)
            if self._reads:
                self._refusal = guard.refusal("read", identity, Right.READ)
            else:
                self._refusal = guard.refusal("add", identity, Right.WRITE)
        what = "reads" if self._reads else "adds"
        if self._refusal is not None:
            log.info("add port: refusing the %s of %s: %s", what, self._peer, self._refusal)
        elif self._reads:
            assert self._c.reads is not None
            self._pipeline = ReadPortPipeline(self._c.reads, self, self._host, LISTENER)
        else:
            self._pipeline = self._c.handler.open_pipeline(self, self._host)
        # One timer per connection for the frame timeout, re-armed only when it fires (a timer
        # scheduled and cancelled per frame was a visible share of the CPU per message).
        self._timer = asyncio.get_running_loop().call_later(self._c.frame_timeout_s, self._check_frame)

    def _next_message(self) -> bytes | bytearray | None:
        """The next complete frame's message, its bytes reserved in the receive budget (released
        once the stream takes it); None until it is all here."""
        if self._frame_bytes < 0:
            available = self._end - self._start
            if not available:
                return None  # idle between frames as long as it likes
            if self._frame_started is None:
                self._frame_started = asyncio.get_running_loop().time()
            if available < _HEADER:
                return None
            (length,) = FRAME_HEADER.unpack_from(self._buf, self._start)
            c = self._c
            if length > self._max_frame_bytes:
                c.limit_stats.hit(LISTENER, "frame_bytes")
                self._end_stream(f"frame of {length} bytes exceeds the {self._max_frame_bytes}-byte limit")
                return None
            if self._queued is not None:
                return None  # its bytes are queued in the receive budget
            if not c.receiving.try_acquire(self._host, length):
                self._pause_reading()
                self._queued = c.receiving.reserve_later(self._host, length, self._frame_room)
                return None
            self._begin_frame(length)
        length = self._frame_bytes
        message: bytes | bytearray
        if self._body is not None:
            if self._body_got < length:
                return None
            message, self._body = self._body, None
        else:
            start = self._start
            if self._end - start < length:
                return None
            message = bytes(self._buf[start : start + length])
            self._start = start + length
        self._frame_bytes = -1
        self._frame_started = None
        return message

    def _begin_frame(self, length: int) -> None:
        """The frame's bytes are reserved: take its header, and receive a large message into a
        buffer of its own."""
        self._reserved = length
        self._frame_bytes = length
        self._start += _HEADER
        if length > _GATHERED_BYTES:
            body = self._body = bytearray(length)
            got = min(length, self._end - self._start)
            body[:got] = self._buf[self._start : self._start + got]
            self._start += got
            self._body_got = got

    def _frame_room(self) -> None:
        """The receive budget reserved the queued frame's bytes, in its turn: read on."""
        queued, self._queued = self._queued, None
        assert queued is not None
        if self._ended:  # a fault or shutdown came first (a reservation ends with the reading)
            self._c.receiving.release(self._host, queued.nbytes)
            return
        self._begin_frame(queued.nbytes)
        self._resume()

    def _take(self, message: bytes | bytearray) -> None:
        """Decode a message and hand it to the stream (or refuse its adds)."""
        if self._reads:
            self._take_read(message)
            return
        c = self._c
        try:
            request = c.decode(message)
        except TooManyAdds as exc:
            c.limit_stats.hit(LISTENER, "adds_per_message")
            self._end_stream(str(exc))
            return
        except DecodeError as exc:
            self._end_stream(str(exc) or type(exc).__name__)
            return
        if self._refusal is not None:
            self.write_answer(refused_add_response(request.request, self._refusal))
            self._release_reservation()
            return
        self._held = request
        self._offer()

    def _take_read(self, message: bytes | bytearray) -> None:
        """Decode a read request and hand it to the read stream (or refuse it)."""
        try:
            request = bookie_pb2.ReadStreamRequest.FromString(bytes(message))  # small: a copy is nothing
        except DecodeError as exc:
            self._end_stream(str(exc) or type(exc).__name__)
            return
        refused: bookie_pb2.ReadStreamResponse | None = None
        if self._refusal is not None:
            refused = refusal(request, f"refused: EUA: {self._refusal}", bookie_pb2.EUA)
        else:
            why = fencing_refusal(request)
            refused = refusal(request, why) if why is not None else None
        if refused is not None:
            self.write_answer(refused)
            self._release_reservation()
            return
        self._held = request
        self._offer()

    def _offer(self) -> None:
        held, pipeline = self._held, self._pipeline
        if held is None or pipeline is None:
            return
        # Not held while offered: a batch done at once answers in this very step, and what that
        # sets off (room for the next message) must not see this one again.
        self._held = None
        if pipeline.offer(held):
            self._release_reservation()
        else:
            self._held = held

    def _resume(self) -> None:
        """Room came (window, byte budgets, or the peer read the refusals): go on reading."""
        if self._closed:
            return
        if self._held is not None:
            self._offer()
            if self._held is not None:
                return  # still no room: the pipeline calls again
        if self._write_paused and (self._refusal is not None or self._reads):
            return  # answered in the step: reading waits for the peer to take the answers
        if self._ended:
            self._finish_if_done()
            return
        self._read_frames()
        if self._held is None and not self._ended and self._reading_paused:
            if self._queued is not None:
                return  # a frame's bytes still waiting in the receive budget
            self._reading_paused = False
            if self._frame_started is not None:  # the frame's clock ran while we did not read
                self._frame_started = asyncio.get_running_loop().time()
            assert self._transport is not None
            self._transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self._reading_paused and not self._closed:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()

    def _cancel_queued(self) -> None:
        if self._queued is not None:
            self._queued.cancel()
            self._queued = None

    def _release_reservation(self) -> None:
        if self._reserved:
            self._c.receiving.release(self._host, self._reserved)
            self._reserved = 0

    # ---- ends and faults -------------------------------------------------------------------

    def _end_reading(self) -> None:
        """No more frames: answer what was started, then close."""
        if self._ended:
            return
        self._ended = True
        self._frame_started = None
        self._cancel_queued()
        self._pause_reading()
        if self._held is None:
            self._release_reservation()
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if not self._ended or self._held is not None or self._closed:
            return
        if self._pipeline is None or self._pipeline.idle:
            self._release_reservation()
            assert self._transport is not None
            self._transport.close()  # after the answers written so far

    def _end_stream(self, why: str) -> None:
        """A broken frame or message: the stream ends (started batches are answered)."""
        if self._refusal is not None:
            self._fail(why)
            return
        self._c.quiet.warning("add port: ending the stream from %s: %s", self._peer, why)
        self._end_reading()

    def _fail(self, why: str) -> None:
        """Close at once, with the reason in the log."""
        self._c.quiet.warning("add port: closing the connection from %s: %s", self._peer, why)
        self._ended = True
        # Not close(): that first flushes the answers still buffered, which a peer that does not
        # read would hold open (with their memory) for ever.
        self.close()

    def _preface_timed_out(self) -> None:
        self._timer = None
        if self._stage != _FRAMES and not self._closed:
            self._fail(f"no preface within {self._preface_timeout_s:g} s")

    def _check_frame(self) -> None:
        """The frame timeout: a frame must arrive whole within it from its first byte."""
        loop = asyncio.get_running_loop()
        started, now, timeout_s = self._frame_started, loop.time(), self._c.frame_timeout_s
        if self._closed:
            return
        paused = self._reading_paused  # not reading: a frame that does not arrive is not late
        if started is None or paused or now < started + timeout_s:
            # A frame that starts later (or once reading goes on) expires no sooner than a timeout
            # from now.
            when = now + timeout_s if started is None or paused else started + timeout_s
            self._timer = loop.call_at(when, self._check_frame)
            return
        self._timer = None
        self._c.limit_stats.hit(LISTENER, "frame_timeout")
        self._end_stream(f"a frame not received whole within {timeout_s:g} s")
        self._body = None
        self._frame_bytes = -1
        self._release_reservation()

    def _write_timed_out(self) -> None:
        self._write_timer = None
        if self._closed:
            return
        self._c.limit_stats.hit(LISTENER, "write_timeout")
        self._fail(f"answers left unread for {self._c.write_timeout_s:g} s")
