"""The budget of read answers not yet sent (bookie.handlers.answer_budget): every answer with entry
bodies holds their bytes until it is sent, over every carrier, and what waits for room holds
nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_requests import MASTER_KEY, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore, FakeLedger

from bkproto.v1 import bookie_pb2
from bookie.handlers import HandlerLimits
from bookie.handlers.answer_budget import reserved_answer
from bookie.handlers.servicer import BookieServicer
from bookie.limits import PeerByteBudget
from bookie.stats import RequestStats

S = bookie_pb2
PEER = "10.0.0.9"


class _UnaryCall:
    """A unary call's context: its peer, and the callbacks gRPC runs when the call ends."""

    def __init__(self) -> None:
        self.callbacks: list[object] = []

    def peer(self) -> str:
        return f"ipv4:{PEER}:5000"

    def add_done_callback(self, callback: object) -> None:
        self.callbacks.append(callback)

    def end(self) -> None:
        for callback in self.callbacks:
            callback(self)  # type: ignore[operator]


def _servicer(entry_bytes: int, share: int) -> BookieServicer:
    """Ledger 4 with entries 0..3 of about ``entry_bytes``; ``share`` bytes of answers per peer."""
    core = FakeBookieCore()
    payload = b"p" * (entry_bytes - len(fake_entry(4, 0, payload=b"")))
    core.ledgers[4] = FakeLedger(MASTER_KEY, entries={e: fake_entry(4, e, payload=payload) for e in range(4)})
    limits = HandlerLimits(read_answers_max_bytes=4 * share, read_answers_max_bytes_per_peer=share)
    return BookieServicer(core, RequestStats(CollectorRegistry()), limits)


async def test_a_unary_batched_read_holds_its_answer_bytes_until_its_call_ends() -> None:
    # gRPC may hold a unary answer, unsent, until the call ends (a peer that never takes it): the
    # answer's byte bound stays reserved until then, and the peer's next call waits for room.
    handler = _servicer(entry_bytes=100, share=2048).read_entries
    request = S.ReadEntriesRequest(ledger_id=4, first_entry_id=0, max_count=2, max_bytes=2048)
    first_call, second_call = _UnaryCall(), _UnaryCall()
    first = await handler.unary(request, first_call)  # type: ignore[arg-type]
    assert S.ReadEntriesResponse.FromString(first.SerializeToString()).status == S.EOK
    assert handler.answer_bytes.used == 2048  # answered, not yet sent
    second = asyncio.create_task(handler.unary(request, second_call))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not second.done()  # the peer's share is held by the first answer
    first_call.end()
    answer = S.ReadEntriesResponse.FromString((await asyncio.wait_for(second, 5)).SerializeToString())
    assert len(answer.bodies) == 2
    second_call.end()
    assert handler.answer_bytes.used == 0


async def test_a_unary_read_holds_its_entrys_bytes_and_one_over_the_share_waits_with_nothing() -> None:
    servicer = _servicer(entry_bytes=1000, share=2000)
    handler, budget = servicer.read_entry, servicer.read_entry.answer_bytes
    calls = [_UnaryCall() for _ in range(3)]
    for call in calls[:2]:
        answer = await handler.unary(S.ReadRequest(ledger_id=4, entry_id=1), call)  # type: ignore[arg-type]
        assert (answer.status, len(answer.body)) == (S.EOK, 1000)
    assert budget.used == 2000
    third = asyncio.create_task(handler.unary(S.ReadRequest(ledger_id=4, entry_id=2), calls[2]))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not third.done() and budget.used == 2000  # it read the entry, then let it go
    calls[0].end()
    read = await asyncio.wait_for(third, 5)
    assert (read.status, read.entry_id, len(read.body)) == (S.EOK, 2, 1000)
    calls[1].end()
    calls[2].end()
    assert budget.used == 0
    # answers without a body (an error) hold nothing
    missing = await handler.unary(S.ReadRequest(ledger_id=4, entry_id=9), _UnaryCall())  # type: ignore[arg-type]
    assert missing.status == S.ENOENTRY and budget.used == 0


async def test_reserved_answer_gives_back_what_it_held_when_serving_again_fails() -> None:
    budget = PeerByteBudget(100, 100)
    assert budget.try_acquire(PEER, 60)  # another answer of the peer's
    served = 0

    async def serve() -> bytes:
        nonlocal served
        served += 1
        if served == 2:
            raise RuntimeError("the entry went away")
        return b"x" * 50

    attempt = asyncio.create_task(reserved_answer(serve, len, budget, PEER))
    await asyncio.sleep(0.05)
    assert (served, budget.used) == (1, 60)  # over the share: dropped, waiting with nothing held
    budget.release(PEER, 60)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(attempt, 5)
    assert budget.used == 0


async def test_reserved_answer_keeps_only_what_the_answer_served_again_needs() -> None:
    budget = PeerByteBudget(100, 100)
    assert budget.try_acquire(PEER, 60)
    sizes = iter([50, 30])  # an entry -1 read again may be another entry

    async def serve() -> bytes:
        return b"x" * next(sizes)

    attempt = asyncio.create_task(reserved_answer(serve, len, budget, PEER))
    await asyncio.sleep(0.05)
    budget.release(PEER, 60)
    answer, reserved = await asyncio.wait_for(attempt, 5)
    assert (len(answer), reserved, budget.used) == (30, 30, 30)


async def test_a_read_stream_holds_at_most_its_share_of_single_entry_answers() -> None:
    # A stream's reads of 1000-byte entries that the client leaves unread: the bookie builds
    # answers for the peer's share (2000 bytes) and reads the rest as room comes.
    servicer = _servicer(entry_bytes=1000, share=2000)
    stream, budget = servicer.read_stream, servicer.read_stream.answer_bytes

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        for i in range(8):
            read = S.ReadRequest(ledger_id=4, entry_id=i % 4)
            yield S.ReadStreamRequest(request_id=i, read=read)

    answers = stream(requests(), None)  # type: ignore[arg-type]
    first = await answers.__anext__()
    await asyncio.sleep(0.05)
    assert budget.used == 2000  # the answer being written and one more
    rest = [answer async for answer in answers]
    assert sorted(a.request_id for a in [first, *rest]) == list(range(8))
    assert {len(a.read.body) for a in [first, *rest]} == {1000}
    assert budget.used == 0
