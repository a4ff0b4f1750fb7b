"""The client side of one bookie's ReadStream: long polls multiplexed over one bidi stream.

A tailing reader keeps dozens of long polls parked per bookie, one per upcoming entry, and each
answer is followed by a new poll. As unary calls each poll pays call set-up and tear-down on both
sides; over a stream it is one message each way. Requests carry ids and answers come back in any
order, so a pending future per id (aiokafka's multiplexed in-flight requests) completes each
caller. A caller that gives up (timeout, cancellation) sends ``cancel`` so the bookie releases the
parked poll at once. If the stream breaks, every pending request fails with
:class:`BookieUnavailableError` and the next request opens a new stream.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import logging
from collections import deque
from typing import Any

import grpc
import grpc.aio

from bkproto.errors import BKError, BookieUnavailableError, TimeoutError
from bkproto.v1 import bookie_pb2

from .rpc_errors import run_stream_loop

log = logging.getLogger(__name__)


class ReadStream:
    def __init__(self, bookie_id: str, call: Any) -> None:
        self.bookie_id = bookie_id
        self._call = call
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bookie_pb2.ReadStreamResponse]] = {}
        self._standing: dict[int, StandingPoll] = {}
        self._outbox: deque[bookie_pb2.ReadStreamRequest] = deque()
        self._wakeup = asyncio.Event()
        self.failed = False
        self._sender = asyncio.create_task(
            run_stream_loop(self._send_loop, self.fail, bookie_id, "read"), name=f"bk-read-send-{bookie_id}"
        )
        self._receiver = asyncio.create_task(
            run_stream_loop(self._recv_loop, self.fail, bookie_id, "read"), name=f"bk-read-recv-{bookie_id}"
        )

    async def request(
        self,
        timeout_s: float,
        *,
        read: bookie_pb2.ReadRequest | None = None,
        read_entries: bookie_pb2.ReadEntriesRequest | None = None,
    ) -> bookie_pb2.ReadStreamResponse:
        """The bookie's answer to ``read`` or ``read_entries`` (one of them); TimeoutError after
        ``timeout_s``. (Stride polls go as standing ones: :meth:`stand`.)"""
        if self.failed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: read stream is closed")
        request_id = next(self._ids)
        future: asyncio.Future[bookie_pb2.ReadStreamResponse] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        if read_entries is not None:
            message = bookie_pb2.ReadStreamRequest(request_id=request_id, read_entries=read_entries)
        else:
            message = bookie_pb2.ReadStreamRequest(request_id=request_id, read=read)
        self._post(message)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except builtins.TimeoutError as exc:  # asyncio's; bkproto's TimeoutError shadows the name
            raise TimeoutError(f"bookie {self.bookie_id}: request timed out") from exc
        finally:
            if self._pending.pop(request_id, None) is not None and not self.failed:
                # Unanswered (timed out or cancelled): release the bookie's parked poll now.
                self._post(bookie_pb2.ReadStreamRequest(request_id=request_id, cancel=True))

    def stand(self, stride_poll: bookie_pb2.StridePollRequest) -> StandingPoll:
        """Send ``stride_poll`` as a standing poll (``standing`` set): its answers, in order,
        come from the returned :class:`StandingPoll`."""
        if self.failed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: read stream is closed")
        request_id = next(self._ids)
        poll = StandingPoll(self, request_id)
        self._standing[request_id] = poll
        stride_poll.standing = True
        self._post(bookie_pb2.ReadStreamRequest(request_id=request_id, stride_poll=stride_poll))
        return poll

    def _withdraw(self, request_id: int) -> None:
        """A standing poll given up before its last answer: the bookie releases it now."""
        if self._standing.pop(request_id, None) is not None and not self.failed:
            self._post(bookie_pb2.ReadStreamRequest(request_id=request_id, cancel=True))

    def _post(self, message: bookie_pb2.ReadStreamRequest) -> None:
        self._outbox.append(message)
        self._wakeup.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._outbox:
                await self._call.write(self._outbox.popleft().SerializeToString())

    async def _recv_loop(self) -> None:
        while True:
            answer = await self._call.read()
            if answer is grpc.aio.EOF:  # type: ignore[attr-defined]
                self.fail(BookieUnavailableError(f"bookie {self.bookie_id}: read stream closed by bookie"))
                return
            standing = self._standing.get(answer.request_id)
            if standing is not None:
                if not answer.stride_poll.more:
                    del self._standing[answer.request_id]
                standing.deliver(answer)
                continue
            future = self._pending.pop(answer.request_id, None)
            if future is not None and not future.done():
                future.set_result(answer)

    def fail(self, error: BKError) -> None:
        """Fail every pending request, stop both tasks, cancel the call. Idempotent."""
        if self.failed:
            return
        self.failed = True
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not current:
                task.cancel()
        self._call.cancel()
        pending = list(self._pending.values())
        self._pending.clear()
        standing = list(self._standing.values())
        self._standing.clear()
        for poll in standing:
            poll.fail(error)
        self._outbox.clear()
        for future in pending:
            if not future.done():
                future.set_exception(type(error)(error.message))

    async def wait_closed(self) -> None:
        await asyncio.gather(self._sender, self._receiver, return_exceptions=True)


class StandingPoll:
    """The answers of one standing stride poll, in the order the bookie sent them. They wait here
    until taken; the bookie sends at most its ``max_count`` entries' worth, so they are bounded.

    A wait for the next answer times out through one timer per poll, moved on only when it fires:
    a timer scheduled and cancelled per answer was a visible share of a tailing reader's CPU."""

    def __init__(self, stream: ReadStream, request_id: int) -> None:
        self._stream = stream
        self._request_id = request_id
        self._answers: deque[bookie_pb2.ReadStreamResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BKError | None = None
        self._deadline = 0.0  # loop time by which the current wait must have an answer
        self._timer: asyncio.TimerHandle | None = None
        self.ended = False  # the last answer came (or the stream failed)

    def deliver(self, answer: bookie_pb2.ReadStreamResponse) -> None:
        self._answers.append(answer)
        self._wake()

    def fail(self, error: BKError) -> None:
        self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self, timeout_s: float) -> bookie_pb2.StridePollResponse:
        """The next answer; TimeoutError after ``timeout_s`` without one."""
        if not self._answers and self._error is None:
            loop = asyncio.get_running_loop()
            self._waiter = loop.create_future()
            self._deadline = loop.time() + timeout_s
            if self._timer is None:
                self._timer = loop.call_at(self._deadline, self._check_deadline)
            try:
                await self._waiter
            finally:
                self._waiter = None
        if not self._answers and self._error is None:  # woken by the deadline
            self.cancel()
            raise TimeoutError(f"bookie {self._stream.bookie_id}: request timed out")
        if not self._answers:
            assert self._error is not None
            self._end()
            raise type(self._error)(self._error.message)
        answer = self._answers.popleft().stride_poll
        if not answer.more:
            self._end()
        return answer

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nothing waits: the next wait sets a timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # a later wait than the one that set this timer
            self._timer = loop.call_at(self._deadline, self._check_deadline)
            return
        waiter.set_result(None)

    def _end(self) -> None:
        self.ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def cancel(self) -> None:
        """Stop it: the bookie releases the parked poll. Nothing if it already ended."""
        if not self.ended:
            self._end()
            self._stream._withdraw(self._request_id)
