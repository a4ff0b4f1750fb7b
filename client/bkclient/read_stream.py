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
        stride_poll: bookie_pb2.StridePollRequest | None = None,
    ) -> bookie_pb2.ReadStreamResponse:
        """The bookie's answer to ``read`` or ``stride_poll``; TimeoutError after ``timeout_s``."""
        if self.failed:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: read stream is closed")
        request_id = next(self._ids)
        future: asyncio.Future[bookie_pb2.ReadStreamResponse] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._post(bookie_pb2.ReadStreamRequest(request_id=request_id, read=read, stride_poll=stride_poll))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except builtins.TimeoutError as exc:  # asyncio's; bkproto's TimeoutError shadows the name
            raise TimeoutError(f"bookie {self.bookie_id}: request timed out") from exc
        finally:
            if self._pending.pop(request_id, None) is not None and not self.failed:
                # Unanswered (timed out or cancelled): release the bookie's parked poll now.
                self._post(bookie_pb2.ReadStreamRequest(request_id=request_id, cancel=True))

    def _post(self, message: bookie_pb2.ReadStreamRequest) -> None:
        self._outbox.append(message)
        self._wakeup.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._outbox:
                await self._call.write(self._outbox.popleft())

    async def _recv_loop(self) -> None:
        while True:
            answer = await self._call.read()
            if answer is grpc.aio.EOF:  # type: ignore[attr-defined]
                self.fail(BookieUnavailableError(f"bookie {self.bookie_id}: read stream closed by bookie"))
                return
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
        self._outbox.clear()
        for future in pending:
            if not future.done():
                future.set_exception(type(error)(error.message))

    async def wait_closed(self) -> None:
        await asyncio.gather(self._sender, self._receiver, return_exceptions=True)

