"""The client's side of an add-port connection: the bookie's frames as they arrive
(format: ``bkproto.add_port``).

A catch-up reader's answers are a megabyte each. asyncio's ``StreamReader`` copies every byte
twice on the way (into its buffer from each socket read, out of it for ``readexactly``) after the
socket read made it a bytes object of its own. Here a frame up to ``_GATHERED_BYTES`` is gathered
in one reused buffer and copied out once; a larger one is received straight into a buffer of its
size, which becomes the frame (the bookie's connection reads its frames the same way).

Frames wait in a short queue for :meth:`FrameReader.read_frame`; past ``_QUEUED_FRAMES`` the
socket is not read until the queue drains, so a caller that stops reading stops the bookie's
sending (its socket buffer fills), not the client's memory. Writes go through an
``asyncio.StreamWriter`` over the same protocol (:func:`open_frame_connection`), whose ``drain``
waits while the socket's buffer is full.

The protocol is a ``BufferedProtocol`` and nothing else: uvloop hands a protocol that is also an
``asyncio.Protocol`` its bytes through ``data_received``, never ``get_buffer``. So the writer's
flow control (what asyncio's ``FlowControlMixin``, a ``Protocol``, would give) is written here.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections import deque
from collections.abc import Awaitable, Callable

from bkproto.add_port import FRAME_HEADER, MAX_FRAME_BYTES, FrameError

# A frame's message up to this size is gathered in the connection's buffer, a larger one received
# into a buffer of its own.
_GATHERED_BYTES = 64 * 1024
_BUFFER_BYTES = 2 * (_GATHERED_BYTES + FRAME_HEADER.size)
_MIN_ROOM = 4096  # the least room offered to a socket read; the buffer is compacted below it
_QUEUED_FRAMES = 16  # frames received but not taken; past this the socket is not read
_HEADER = FRAME_HEADER.size

Frame = bytes | bytearray  # a received frame's message (the large ones are their own bytearray)


class FrameReader(asyncio.BufferedProtocol):
    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray(_BUFFER_BYTES)
        self._start = 0  # the unread bytes are self._buffer[self._start:self._end]
        self._end = 0
        self._large: bytearray | None = None  # a frame larger than _GATHERED_BYTES, being received
        self._filled = 0  # ... its bytes received so far
        self._frames: deque[Frame] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._reading_paused = False
        self._writing_paused = False  # the transport's write buffer is over its high-water mark
        self._connection_lost = False
        self._drain_waiters: deque[asyncio.Future[None]] = deque()
        self._running_loop = asyncio.get_running_loop()
        self._closed: asyncio.Future[None] = self._running_loop.create_future()

    # -- protocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._filled :]
        if len(self._buffer) - self._end < _MIN_ROOM:
            # What is left is the start of a frame that fits once moved to the front.
            unread = self._end - self._start
            self._buffer[:unread] = self._buffer[self._start : self._end]
            self._start, self._end = 0, unread
        return memoryview(self._buffer)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        large = self._large
        if large is not None:
            self._filled += nbytes
            if self._filled == len(large):
                self._large = None
                self._deliver(large)
            return
        self._end += nbytes
        self._split()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_lost = True
        self._wake_drain_waiters(exc)
        if exc is not None and self._error is None:
            self._error = exc
        self._eof = True
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._wake_drain_waiters(None)

    def _wake_drain_waiters(self, error: BaseException | None) -> None:
        self._writing_paused = False
        waiters, self._drain_waiters = self._drain_waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    async def _drain_helper(self) -> None:
        """What ``StreamWriter.drain`` awaits: returns at once unless the transport paused
        writing; raises the connection's error once it is lost."""
        if self._connection_lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        waiter = self._running_loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        """What ``StreamWriter.wait_closed`` awaits."""
        return self._closed

    # -- frames --------------------------------------------------------------------------------

    def _split(self) -> None:
        """Take every whole frame out of the buffer; start receiving a large one on its own."""
        buffer = self._buffer
        while self._end - self._start >= _HEADER:
            (length,) = FRAME_HEADER.unpack_from(buffer, self._start)
            if length > self._max_frame_bytes:
                limit = self._max_frame_bytes
                self._break(FrameError(f"frame of {length} bytes exceeds the {limit}-byte limit"))
                return
            body = self._start + _HEADER
            have = self._end - body
            if have >= length:
                self._start = body + length
                self._deliver(bytes(memoryview(buffer)[body : self._start]))
            elif length > _GATHERED_BYTES:
                large = bytearray(length)
                large[:have] = memoryview(buffer)[body : self._end]
                self._large, self._filled = large, have
                self._start = self._end = 0
                return
            else:
                break
        if self._start == self._end:
            self._start = self._end = 0

    def _deliver(self, frame: Frame) -> None:
        self._frames.append(frame)
        self._wake()
        if len(self._frames) >= _QUEUED_FRAMES and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()  # type: ignore[attr-defined]

    def _break(self, error: BaseException) -> None:
        self._error = error
        self._wake()
        if self._transport is not None:
            self._transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_frame(self) -> Frame | None:
        """The next frame's message, or None once the bookie closed the connection between
        frames. Raises the connection's error (an ``OSError``), :class:`FrameError` for a frame
        over the limit, and ``asyncio.IncompleteReadError`` for a connection closed inside one."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                partial = self._end - self._start
                if self._large is not None:
                    raise asyncio.IncompleteReadError(bytes(self._large[: self._filled]), len(self._large))
                if partial:
                    raise asyncio.IncompleteReadError(bytes(self._buffer[self._start : self._end]), None)
                return None
            self._waiter = self._running_loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        if self._reading_paused and len(self._frames) < _QUEUED_FRAMES // 2 and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()  # type: ignore[attr-defined]
        return frame


# What opens an add-port connection: (host, port, TLS context) -> its frames and a writer. The
# client opens real sockets (:func:`open_frame_connection`); the simulation carries the bytes over
# its own network (tests/sim).
FrameConnector = Callable[
    [str, int, "ssl_module.SSLContext | None"], Awaitable[tuple["FrameReader", asyncio.StreamWriter]]
]


async def open_frame_connection(
    host: str, port: int, ssl: ssl_module.SSLContext | None
) -> tuple[FrameReader, asyncio.StreamWriter]:
    """A connection to ``host:port`` (TLS with ``ssl``): its frames, and a writer."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(FrameReader, host, port, ssl=ssl)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return protocol, writer

