"""A standing poll's waits on the client's ReadStream, over a scripted stream call: each wait
times out on its own deadline (one timer per poll, moved on when it fires), and a timed-out poll
is withdrawn from the bookie."""

from __future__ import annotations

import asyncio

import grpc.aio
import pytest

from bkclient.read_stream import ReadStream
from bkproto.errors import TimeoutError as RequestTimeoutError
from bkproto.v1 import bookie_pb2

S = bookie_pb2


class ScriptedCall:
    """The stream call seam (``write``/``read``/``cancel``): records what the client sends and
    gives it the answers a test pushes."""

    def __init__(self) -> None:
        self.sent: list[S.ReadStreamRequest] = []
        self.answers: asyncio.Queue[S.ReadStreamResponse | None] = asyncio.Queue()

    async def write(self, message: bytes) -> None:
        self.sent.append(S.ReadStreamRequest.FromString(message))

    async def read(self) -> object:
        answer = await self.answers.get()
        return grpc.aio.EOF if answer is None else answer  # type: ignore[attr-defined]

    def cancel(self) -> None:
        self.answers.put_nowait(None)

    def answer(self, request_id: int, entry_id: int, more: bool) -> None:
        body = b"e%d" % entry_id
        poll = S.StridePollResponse(status=S.EOK, first_entry_id=entry_id, bodies=[body], more=more)
        self.answers.put_nowait(S.ReadStreamResponse(request_id=request_id, stride_poll=poll))


def poll_request(first: int = 0) -> S.StridePollRequest:
    return S.StridePollRequest(ledger_id=1, first_entry_id=first, stride=1, max_count=10, timeout_ms=1000)


async def test_a_wait_without_an_answer_times_out_and_withdraws_the_poll() -> None:
    call = ScriptedCall()
    stream = ReadStream("b1", call)
    poll = stream.stand(poll_request())
    started = asyncio.get_running_loop().time()
    with pytest.raises(RequestTimeoutError):
        await poll.next(0.2)
    assert asyncio.get_running_loop().time() - started >= 0.2
    await asyncio.sleep(0.05)
    assert [(m.request_id, m.cancel) for m in call.sent] == [(1, False), (1, True)]
    assert poll.ended
    stream.fail(RequestTimeoutError("test over"))


async def test_each_wait_has_its_own_deadline() -> None:
    call = ScriptedCall()
    stream = ReadStream("b1", call)
    poll = stream.stand(poll_request())
    loop = asyncio.get_running_loop()
    loop.call_later(0.15, call.answer, 1, 0, True)
    first = await poll.next(0.25)
    # The first wait's timer fires at 0.25 s, inside this second wait (deadline 0.4 s): it must
    # move on, not end this wait early.
    loop.call_later(0.2, call.answer, 1, 1, False)
    second = await poll.next(0.25)
    assert [(a.first_entry_id, a.more) for a in (first, second)] == [(0, True), (1, False)]
    assert poll.ended
    assert [m.cancel for m in call.sent] == [False]  # answered to its end: nothing withdrawn
    stream.fail(RequestTimeoutError("test over"))
