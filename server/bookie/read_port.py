"""The ReadStream over the add port (format and why: ``bkproto.add_port``).

A connection that opened with the read preface is served by the same
:class:`~bookie.handlers.read_stream.ReadStreamHandler` as the gRPC ReadStream method: the same
request tasks, in-flight slots, standing polls and long-poll limits. Only the carrier differs:
requests come from the connection's frames (``bookie.add_port_connection``) through
:meth:`ReadPortPipeline.offer`, and answers go back as frames from the handler's answer loop.

Backpressure, as on gRPC: the handler takes a request only when the stream has a free in-flight
slot; past a few requests queued ahead of it ``offer`` says no and the connection stops reading
its socket until :meth:`ReadAnswerCarrier.room`. An answer the socket does not take at once (its
buffer past the high-water mark) holds the answer loop until :meth:`ReadPortPipeline.flush`, so a
peer that does not read its answers stops its standing polls too, and is closed by the port's
write timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Protocol

from bkproto.v1 import bookie_pb2
from bookie.handlers.read_stream import ReadStreamHandler, StreamAnswer

log = logging.getLogger(__name__)

# Requests decoded and waiting for the handler to take them; past this the socket is not read.
_QUEUED_REQUESTS = 8


class ReadAnswerCarrier(Protocol):
    """What carries a read stream to and from its peer (an add-port connection)."""

    def write_answer(self, response: StreamAnswer) -> bool:
        """Send an answer; whether the carrier takes more now (False: wait for ``flush``)."""
        ...

    def room(self) -> None:
        """A request refused by ``offer`` may now be offered again."""
        ...

    def broken(self, why: str) -> None:
        """The stream cannot go on: close the connection."""
        ...


class PortCall:
    """Stands in for the gRPC context the request handlers learn their peer from
    (``bookie.limits.CURRENT_CALL``): long polls are bounded per peer on every listener, and
    counted under the listener they came by."""

    __slots__ = ("_peer", "listener")

    def __init__(self, peer: str, listener: str) -> None:
        self._peer = peer
        self.listener = listener

    def peer(self) -> str:
        return self._peer


def fencing_refusal(request: bookie_pb2.ReadStreamRequest) -> str | None:
    """Why the read port does not serve ``request`` (a fencing read), or None."""
    if request.HasField("read") and request.read.flags & bookie_pb2.FENCE_LEDGER:
        return "is a fencing read: the add port serves none (use the gRPC ReadEntry call)"
    return None


class ReadPortPipeline:
    def __init__(
        self, handler: ReadStreamHandler, carrier: ReadAnswerCarrier, peer: str, listener: str
    ) -> None:
        """``peer`` is the connection's IP address, ``listener`` the limits' label of its port."""
        self._carrier = carrier
        self._queued: deque[bookie_pb2.ReadStreamRequest] = deque()
        self._refused = False  # an offer was refused: the carrier waits for ``room``
        self._arrived: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._task = asyncio.create_task(
            self._run(handler, PortCall(peer, listener)), name=f"bk-read-port-{peer}"
        )

    @property
    def idle(self) -> bool:
        """Always: a read answer is no promise kept for the peer (unlike an add's), so a stream
        whose peer stopped sending may close with its polls still parked."""
        return True

    def offer(self, request: bookie_pb2.ReadStreamRequest) -> bool:
        """Queue a request for the handler; False (and ``room`` later) while too many wait."""
        if len(self._queued) >= _QUEUED_REQUESTS:
            self._refused = True
            return False
        self._queued.append(request)
        _wake(self._arrived)
        return True

    def flush(self) -> None:
        """The carrier takes answers again."""
        _wake(self._writable)

    def close(self) -> None:
        """The connection is gone: cancel its requests (no answer follows)."""
        self._task.cancel()

    async def _requests(self) -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queued:
                self._arrived = loop.create_future()
                await self._arrived
                self._arrived = None
                continue
            request = self._queued.popleft()
            if self._refused:
                self._refused = False
                self._carrier.room()
            yield request

    async def _run(self, handler: ReadStreamHandler, call: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for answer in handler(self._requests(), call):
                if not self._carrier.write_answer(answer):
                    self._writable = loop.create_future()
                    await self._writable
                    self._writable = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken stream ends its connection, never the bookie
            log.error("read stream over the add port failed", exc_info=exc)
            self._carrier.broken(f"read stream failed: {exc!r}")


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
