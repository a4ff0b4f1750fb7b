"""ReadStream: ReadEntry, StridePoll and ReadEntries requests multiplexed over one stream, answered as they
complete.

Tailing readers keep long polls parked on every bookie. As unary calls, each one pays call set-up
and tear-down on both sides, about twice the CPU of a stream message. Over one stream each poll is
two messages. Every request is served exactly as its handler serves it elsewhere (validation, error
translation, latency stats), in its own task so that a parked poll does not hold up the others,
and its answer goes out tagged with the request's id.

A *standing* stride poll (``StridePollRequest.standing``) is answered more than once under its id:
after an answer that brought entries it parks again from the entry after them, until it has
answered ``max_count`` entries in all (every answer but the last says ``more``). A tailing reader
at a steady rate is answered about once per entry, and a stream message costs each side far more
CPU than an entry does, so this halves the messages of a tail: one request per window of entries
instead of one per answer.

Bounds: at most ``max_in_flight`` requests of one stream are being served or have an answer not
yet written (a standing poll holds its slot until its last answer, and parks again only once its
previous answer is written). Past that the stream's reader stops reading and HTTP/2 flow control
pushes back on the client, so a client that stops reading answers also stops the bookie reading
its requests, and its standing polls.
Parked polls are also bounded bookie-wide by the long-poll waiters. A ``cancel`` message, or the
end of the stream, cancels the requests still running; no answer follows a cancelled request.

Every answer with entry bodies holds their bytes in the budget of read answers not yet sent
(:mod:`bookie.handlers.answer_budget`, shared with the unary calls) until it is written or
dropped: a thousand slots of megabyte answers would otherwise let one stream that reads no
answers make the bookie hold gigabytes. A ReadEntries request reserves its bound before it reads;
a read or a stride poll what it read. Past the budget the request waits, holding its slot.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import grpc.aio

from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage, stream_read_entries
from bookie.handlers.answer_budget import (
    read_body_bytes,
    read_entries_bytes,
    reserved_answer,
    stride_poll_body_bytes,
)
from bookie.handlers.common import status_code
from bookie.handlers.read_entries import ReadEntriesHandler
from bookie.handlers.read_entry import ReadEntryHandler
from bookie.handlers.stride_poll import StridePollHandler
from bookie.limits import PeerByteBudget, peer_host

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
# An answer: a message, or a ReadEntries answer already in wire bytes (a thousand bodies, copied once)
StreamAnswer = bookie_pb2.ReadStreamResponse | EncodedMessage


class _Queued(NamedTuple):
    """An answer waiting to be written."""

    answer: StreamAnswer
    written: asyncio.Future[None] | None  # what a standing poll waits on until it is written
    reserved: int  # answer bytes reserved from the budget, given back once written


class _Stream:
    """One stream's requests in progress and answers waiting to be written."""

    def __init__(self, max_in_flight: int, release: Callable[[int], None]) -> None:
        """``release``: gives answer bytes back to the budget (an answer that is never written)."""
        self.answers: asyncio.Queue[_Queued | None] = asyncio.Queue()
        self.running: dict[int, asyncio.Task[None]] = {}
        self.slots = asyncio.Semaphore(max_in_flight)
        self.holding: set[int] = set()  # requests holding a slot (a standing poll: until its last answer)
        self.requests_ended = False
        # The stream is over: nothing queued is written any more. A request can still post after
        # that (on Python 3.11 a task cancelled as its wait ends may go on), so posts give the
        # bytes back at once rather than leave them in a queue nobody reads.
        self.closed = False
        self._release = release

    def close(self) -> None:
        """The stream is over: the answers still queued give their bytes back."""
        self.closed = True
        while not self.answers.empty():
            left = self.answers.get_nowait()
            if left is not None and left.reserved:
                self._release(left.reserved)

    def post(self, request_id: int, answer: StreamAnswer, reserved: int = 0) -> None:
        """Queue the last answer of ``request_id``; its slot (and its ``reserved`` answer bytes)
        go with it."""
        self.holding.discard(request_id)
        if self.closed:
            if reserved:
                self._release(reserved)
            return
        self.answers.put_nowait(_Queued(answer, None, reserved))

    def refuse(self, answer: bookie_pb2.ReadStreamResponse) -> None:
        """Queue the refusal of a request that was not started; the slot it took goes with it."""
        self.answers.put_nowait(_Queued(answer, None, 0))

    def post_more(self, answer: bookie_pb2.ReadStreamResponse, reserved: int) -> asyncio.Future[None]:
        """Queue an answer of a standing poll that goes on; it keeps its slot (its ``reserved``
        answer bytes go with the answer). The future is done once the answer is written: one
        answer of a poll waits at a time."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closed:  # never written: the poll ends (its waiter is cancelled)
            if reserved:
                self._release(reserved)
            written.cancel()
            return written
        self.answers.put_nowait(_Queued(answer, written, reserved))
        return written

    def finished(self, request_id: int, task: asyncio.Task[None]) -> None:
        self.running.pop(request_id, None)
        if request_id in self.holding:
            self.holding.discard(request_id)
            self.slots.release()  # no last answer will be written for it
        if not task.cancelled() and task.exception() is not None:
            log.error("read stream request %d failed", request_id, exc_info=task.exception())
        if self.requests_ended and not self.running:
            self.answers.put_nowait(None)  # the writer may be waiting for this last answer

    def end_requests(self) -> None:
        self.requests_ended = True
        self.answers.put_nowait(None)

    @property
    def done(self) -> bool:
        return self.requests_ended and not self.running


class ReadStreamHandler:
    def __init__(
        self,
        read_entry: ReadEntryHandler,
        stride_poll: StridePollHandler,
        read_entries: ReadEntriesHandler,
        max_in_flight: int,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"read stream in-flight limit must be >= 1, got {max_in_flight}")
        self._read_entry = read_entry
        self._stride_poll = stride_poll
        self._read_entries = read_entries
        self._max_in_flight = max_in_flight
        self.answer_bytes: PeerByteBudget = read_entries.answer_bytes

    async def __call__(
        self, request_iterator: AsyncIterator[bookie_pb2.ReadStreamRequest], context: Context
    ) -> AsyncIterator[StreamAnswer]:
        peer = _peer_of(context)
        stream = _Stream(self._max_in_flight, functools.partial(self.answer_bytes.release, peer))
        reader = asyncio.create_task(self._read(request_iterator, stream, context))
        try:
            while True:
                queued = await stream.answers.get()
                if queued is not None:
                    answer, written, reserved = queued
                    try:
                        yield answer
                    finally:
                        if reserved:
                            self.answer_bytes.release(peer, reserved)
                    if written is None:
                        stream.slots.release()  # the slot its request took
                    elif not written.done():  # (a poll cancelled meanwhile no longer waits)
                        written.set_result(None)
                elif stream.done and stream.answers.empty():
                    # (not empty: an answer posted after the requests ended, before the marker
                    # its task's end queued; it is written first)
                    return
        finally:
            stream.close()
            reader.cancel()
            for task in stream.running.values():
                task.cancel()

    async def _read(
        self, request_iterator: AsyncIterator[bookie_pb2.ReadStreamRequest], stream: _Stream, context: Context
    ) -> None:
        try:
            async for message in request_iterator:
                request_id = message.request_id
                if message.cancel:
                    task = stream.running.get(request_id)
                    if task is not None:
                        task.cancel()
                    continue
                await stream.slots.acquire()
                if request_id in stream.running:  # a client bug: refuse it rather than lose either
                    stream.refuse(refusal(message, "is already in flight on this stream"))
                    continue
                if message.WhichOneof("kind") is None:
                    stream.refuse(refusal(message, "asks for nothing (no read, stride_poll or read_entries)"))
                    continue
                task = asyncio.create_task(self._serve(message, stream, context))
                stream.holding.add(request_id)
                stream.running[request_id] = task
                task.add_done_callback(functools.partial(stream.finished, request_id))
        except asyncio.CancelledError:
            pass  # the stream is over
        except Exception as exc:  # noqa: BLE001 - a broken stream ends this stream, never the bookie
            log.debug("read stream ended by the client: %r", exc)
        finally:
            stream.end_requests()

    async def _serve(self, message: bookie_pb2.ReadStreamRequest, stream: _Stream, context: Context) -> None:
        """One request's answer, its bodies' bytes reserved in the answer budget until written."""
        request_id = message.request_id
        peer = _peer_of(context)
        if message.HasField("stride_poll"):
            if message.stride_poll.standing:
                await self._stand(request_id, message.stride_poll, stream, context)
                return
            polled, reserved = await reserved_answer(
                self._stride_poll.rereadable(message.stride_poll, context), stride_poll_body_bytes,
                self.answer_bytes, peer,
            )  # fmt: skip
            answer: StreamAnswer = bookie_pb2.ReadStreamResponse(request_id=request_id, stride_poll=polled)
        elif message.HasField("read_entries"):
            await self._read_batch(request_id, message.read_entries, stream, context)
            return
        else:
            read, reserved = await reserved_answer(
                self._read_entry.rereadable(message.read, context), read_body_bytes, self.answer_bytes, peer
            )
            answer = bookie_pb2.ReadStreamResponse(request_id=request_id, read=read)
        stream.post(request_id, answer, reserved)

    async def _read_batch(
        self, request_id: int, request: bookie_pb2.ReadEntriesRequest, stream: _Stream, context: Context
    ) -> None:
        """A ReadEntries request: its answer's bound reserved first, then what it holds, given
        back by the answer loop once written."""
        answer, reserved = await reserved_answer(
            lambda: self._read_entries(request, context), read_entries_bytes, self.answer_bytes,
            _peer_of(context), self._read_entries.answer_bound(request),
        )  # fmt: skip
        batch = answer if isinstance(answer, EncodedMessage) else (
            EncodedMessage(answer.SerializeToString(), answer.status)  # an error answer
        )  # fmt: skip
        stream.post(request_id, stream_read_entries(request_id, batch), reserved)

    async def _stand(
        self, request_id: int, request: bookie_pb2.StridePollRequest, stream: _Stream, context: Context
    ) -> None:
        """A standing stride poll: answer, park again after the entries answered, answer again,
        until ``max_count`` entries in all (or an answer without entries). It holds its one slot
        throughout, and parks again only once its answer is written."""
        poll = bookie_pb2.StridePollRequest()
        poll.CopyFrom(request)
        remaining = request.max_count
        peer = _peer_of(context)
        while True:
            polled, reserved = await reserved_answer(
                self._stride_poll.rereadable(poll, context), stride_poll_body_bytes, self.answer_bytes, peer
            )
            count = len(polled.bodies)
            remaining -= count
            polled.more = polled.status == bookie_pb2.EOK and count > 0 and remaining > 0
            answer = bookie_pb2.ReadStreamResponse(request_id=request_id, stride_poll=polled)
            if not polled.more:
                stream.post(request_id, answer, reserved)
                return
            await stream.post_more(answer, reserved)
            poll.first_entry_id += count * poll.stride
            poll.max_count = remaining


def _peer_of(context: Context | None) -> str:
    """The IP address the answer budget charges (a test's stream may have no context)."""
    return peer_host(context.peer()) if context is not None else ""


def refusal(
    message: bookie_pb2.ReadStreamRequest, why: str, status: int = bookie_pb2.EBADREQ
) -> bookie_pb2.ReadStreamResponse:
    """``status`` (EBADREQ: a request that cannot be served) for a request, in the shape of what it
    asked for; the message says which request and ``why``."""
    text = f"request id {message.request_id} {why}"
    if message.HasField("stride_poll"):
        poll = message.stride_poll
        refused = bookie_pb2.StridePollResponse(
            status=status_code(status),
            ledger_id=poll.ledger_id,
            first_entry_id=poll.first_entry_id,
            message=text,
        )
        return bookie_pb2.ReadStreamResponse(request_id=message.request_id, stride_poll=refused)
    if message.HasField("read_entries"):
        batch = message.read_entries
        refused_batch = bookie_pb2.ReadEntriesResponse(
            status=status_code(status),
            ledger_id=batch.ledger_id,
            first_entry_id=batch.first_entry_id,
            message=text,
        )
        return bookie_pb2.ReadStreamResponse(request_id=message.request_id, read_entries=refused_batch)
    read = bookie_pb2.ReadResponse(
        status=status_code(status),
        ledger_id=message.read.ledger_id,
        entry_id=message.read.entry_id,
        message=text,
    )
    return bookie_pb2.ReadStreamResponse(request_id=message.request_id, read=read)
