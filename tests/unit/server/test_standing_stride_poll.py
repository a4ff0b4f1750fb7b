"""Standing stride polls on a bookie's ReadStream, over a real loopback gRPC server with an
in-memory core: answered again under one request id as the LAC moves, until their count, and
never holding more of the stream's slots than their unwritten answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio
import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_requests import add_request, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore, FakeLedger

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.handlers import HandlerLimits
from bookie.handlers.read_entries import ReadEntriesHandler
from bookie.handlers.read_entry import ReadEntryHandler
from bookie.handlers.read_stream import ReadStreamHandler
from bookie.handlers.stride_poll import StridePollHandler
from bookie.service import BookieService
from bookie.stats import RequestStats

S = bookie_pb2
LEDGER = 21


class Bookie:
    def __init__(self, core: FakeBookieCore, service: BookieService) -> None:
        self.core = core
        self.service = service
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        self.stub = bookie_pb2_grpc.BookieStub(self.channel)

    async def add(self, *adds: bookie_pb2.AddRequest) -> None:
        call = self.stub.AddEntries()
        await call.write(S.AddEntriesRequest(adds=list(adds)))
        await call.done_writing()
        answers = [answer async for answer in call]
        assert [r.status for a in answers for r in a.results] == [S.EOK] * len(adds)


async def start(read_stream_max_in_flight: int = 1024) -> Bookie:
    limits = HandlerLimits(max_long_poll_ms=60_000, read_stream_max_in_flight=read_stream_max_in_flight)
    core = FakeBookieCore()
    service = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, limits)
    await service.start()
    return Bookie(core, service)


@pytest.fixture
async def bookie() -> AsyncIterator[Bookie]:
    b = await start()
    yield b
    await b.channel.close()
    await b.service.stop(0)


def standing(request_id: int, first: int, max_count: int, timeout_ms: int = 30_000) -> S.ReadStreamRequest:
    poll = S.StridePollRequest(
        ledger_id=LEDGER, first_entry_id=first, stride=1, max_count=max_count,
        max_bytes=1 << 20, timeout_ms=timeout_ms, standing=True,
    )
    return S.ReadStreamRequest(request_id=request_id, stride_poll=poll)


async def next_answer(call: Any) -> S.ReadStreamResponse:
    answer: S.ReadStreamResponse = await asyncio.wait_for(call.read(), 5)
    return answer


async def test_a_standing_poll_answers_each_move_of_the_lac_until_its_count(bookie: Bookie) -> None:
    call = bookie.stub.ReadStream()
    await call.write(standing(7, first=0, max_count=5))
    answers = []
    await bookie.add(add_request(LEDGER, 0), add_request(LEDGER, 1, lac=0))  # LAC 0
    answers.append(await next_answer(call))
    await bookie.add(*(add_request(LEDGER, e, lac=e - 1) for e in (2, 3, 4)))
    while sum(len(a.stride_poll.bodies) for a in answers) < 4:
        answers.append(await next_answer(call))
    await bookie.add(add_request(LEDGER, 5, lac=4), add_request(LEDGER, 6, lac=5))  # LAC 5: past the count
    answers.append(await next_answer(call))
    polls = [a.stride_poll for a in answers]
    assert {a.request_id for a in answers} == {7}
    assert [b for p in polls for b in p.bodies] == [fake_entry(LEDGER, e, e - 1) for e in range(5)]
    assert [p.more for p in polls] == [True] * (len(polls) - 1) + [False]  # 5 entries, then done
    starts = [p.first_entry_id for p in polls]
    assert starts == [0, *(s + len(p.bodies) for s, p in zip(starts, polls, strict=False))][: len(polls)]
    # Nothing more comes for id 7: the next answer on the stream is a new request's.
    await call.write(standing(8, first=5, max_count=1))
    assert (await next_answer(call)).request_id == 8
    call.cancel()


async def test_a_plain_stride_poll_is_answered_once(bookie: Bookie) -> None:
    await bookie.add(add_request(LEDGER, 0), add_request(LEDGER, 1, lac=0))
    call = bookie.stub.ReadStream()
    plain = standing(4, first=0, max_count=100)
    plain.stride_poll.standing = False
    await call.write(plain)
    answer = await next_answer(call)
    found = (answer.request_id, list(answer.stride_poll.bodies), answer.stride_poll.more)
    assert found == (4, [fake_entry(LEDGER, 0)], False)
    await bookie.add(add_request(LEDGER, 2, lac=1))  # would wake a standing poll from entry 1
    await call.write(S.ReadStreamRequest(request_id=5, read=S.ReadRequest(ledger_id=LEDGER, entry_id=1)))
    assert (await next_answer(call)).request_id == 5
    call.cancel()


async def test_a_standing_poll_ends_when_a_wait_times_out(bookie: Bookie) -> None:
    await bookie.add(add_request(LEDGER, 0), add_request(LEDGER, 1, lac=0))
    call = bookie.stub.ReadStream()
    await call.write(standing(3, first=0, max_count=100, timeout_ms=100))
    first = (await next_answer(call)).stride_poll
    assert (first.status, list(first.bodies), first.more) == (S.EOK, [fake_entry(LEDGER, 0)], True)
    last = (await next_answer(call)).stride_poll  # nothing confirmed past 0 within 100 ms
    assert (last.status, last.first_entry_id, last.max_lac, last.more) == (S.ENOENTRY, 1, 0, False)
    call.cancel()


async def test_a_cancelled_standing_poll_gives_back_its_slot() -> None:
    # One slot per stream: the standing poll holds it while parked for its second answer. If the
    # cancel did not give it back, the read that follows would never be served.
    bookie = await start(read_stream_max_in_flight=1)
    try:
        await bookie.add(add_request(LEDGER, 0), add_request(LEDGER, 1, lac=0))
        call = bookie.stub.ReadStream()
        await call.write(standing(1, first=0, max_count=100))
        assert (await next_answer(call)).stride_poll.more
        await asyncio.sleep(0.1)  # parked again, from entry 1
        await call.write(S.ReadStreamRequest(request_id=1, cancel=True))
        await call.write(S.ReadStreamRequest(request_id=2, read=S.ReadRequest(ledger_id=LEDGER, entry_id=0)))
        answer = await next_answer(call)
        assert (answer.request_id, answer.read.status, answer.read.body) == (2, S.EOK, fake_entry(LEDGER, 0))
        await bookie.add(add_request(LEDGER, 2, lac=1))  # would have woken the cancelled poll
        await call.write(S.ReadStreamRequest(request_id=3, read=S.ReadRequest(ledger_id=LEDGER, entry_id=1)))
        assert (await next_answer(call)).request_id == 3
        call.cancel()
    finally:
        await bookie.channel.close()
        await bookie.service.stop(0)


async def test_standing_polls_keep_a_streams_requests_within_its_slots() -> None:
    # Each standing poll holds one slot until its last answer, so a client that sends many of them
    # (and reads every answer) has at most max_in_flight requests running at once on the bookie.
    core, stats, limits = FakeBookieCore(), RequestStats(CollectorRegistry()), HandlerLimits()
    ledger = core.ledgers[LEDGER] = FakeLedger(b"k" * 20)
    ledger.entries = {e: fake_entry(LEDGER, e) for e in range(100)}
    ledger.lac = 99
    pulled: list[int] = []

    async def requests() -> AsyncIterator[S.ReadStreamRequest]:
        for i in range(1, 21):
            pulled.append(i)
            poll = S.StridePollRequest(
                ledger_id=LEDGER, first_entry_id=0, stride=1, max_count=100, max_bytes=1,  # one a time
                timeout_ms=1000, standing=True,
            )
            yield S.ReadStreamRequest(request_id=i, stride_poll=poll)

    handler = ReadStreamHandler(
        ReadEntryHandler(core, stats, limits),
        StridePollHandler(core, stats, limits),
        ReadEntriesHandler(core, stats, limits),
        max_in_flight=2,
    )
    answers = handler(requests(), None)  # type: ignore[arg-type]
    seen: dict[int, int] = {}
    async for answer in answers:
        seen[answer.request_id] = seen.get(answer.request_id, 0) + 1
        ended = sum(1 for count in seen.values() if count == 100)
        assert len(pulled) <= ended + 3  # two running, one read and waiting for a slot
        if ended == 20:
            break
    await answers.aclose()
    assert seen == dict.fromkeys(range(1, 21), 100)  # each answered its 100 entries, one by one
