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
from bkproto.wire import EncodedMessage
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


def _gate_reads(servicer: BookieServicer, entry_ids: set[int], stubborn: bool = False) -> asyncio.Event:
    """Reads of ``entry_ids`` wait until the returned event is set; ``stubborn`` ones go on
    waiting when cancelled, as a cancellation swallowed by ``asyncio.wait_for`` (Python 3.11)."""
    core = servicer.read_entry.core
    release = asyncio.Event()
    read_entry = core.read_entry

    async def gated(ledger_id: int, entry_id: int) -> bytes:
        if entry_id in entry_ids:
            try:
                await release.wait()
            except asyncio.CancelledError:
                if not stubborn:
                    raise
                await release.wait()
        return await read_entry(ledger_id, entry_id)

    core.read_entry = gated  # type: ignore[method-assign]
    return release


async def test_a_unary_batched_read_holds_its_answer_bytes_until_its_call_ends() -> None:
    # gRPC may hold a unary answer, unsent, until the call ends (a peer that never takes it): the
    # answer's bytes stay reserved until then, and the peer's next call, which reserves its
    # 2048-byte bound first, waits for room.
    handler = _servicer(entry_bytes=100, share=2048).read_entries
    request = S.ReadEntriesRequest(ledger_id=4, first_entry_id=0, max_count=2, max_bytes=2048)
    first_call, second_call = _UnaryCall(), _UnaryCall()
    first = await handler.unary(request, first_call)  # type: ignore[arg-type]
    assert S.ReadEntriesResponse.FromString(first.SerializeToString()).status == S.EOK
    held = handler.answer_bytes.used
    assert held == len(first.SerializeToString())  # answered, not yet sent: what it holds
    second = asyncio.create_task(handler.unary(request, second_call))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not second.done()  # the peer's share is held by the first answer
    first_call.end()
    answer = S.ReadEntriesResponse.FromString((await asyncio.wait_for(second, 5)).SerializeToString())
    assert len(answer.bodies) == 2
    second_call.end()
    assert handler.answer_bytes.used == 0


def _read(answer: EncodedMessage) -> S.ReadResponse:
    """A unary ReadEntry's answer (wire bytes, as gRPC is given it) as a message."""
    return S.ReadResponse.FromString(answer.SerializeToString())


async def test_a_unary_read_holds_its_entrys_bytes_and_one_over_the_share_waits_with_nothing() -> None:
    servicer = _servicer(entry_bytes=1000, share=2000)
    handler, budget = servicer.read_entry, servicer.read_entry.answer_bytes
    calls = [_UnaryCall() for _ in range(3)]
    for call in calls[:2]:
        answer = _read(await handler.unary(S.ReadRequest(ledger_id=4, entry_id=1), call))  # type: ignore[arg-type]
        assert (answer.status, len(answer.body)) == (S.EOK, 1000)
    assert budget.used == 2000
    third = asyncio.create_task(handler.unary(S.ReadRequest(ledger_id=4, entry_id=2), calls[2]))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not third.done() and budget.used == 2000  # it read the entry, then let it go
    calls[0].end()
    read = _read(await asyncio.wait_for(third, 5))
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


async def test_a_batched_read_holds_what_it_sends_though_it_asked_for_less() -> None:
    # The first entry comes whatever max_bytes says: a request for 1 byte holds the entry's size.
    servicer = _servicer(entry_bytes=1000, share=2048)
    handler, budget = servicer.read_entries, servicer.read_entries.answer_bytes
    request = S.ReadEntriesRequest(ledger_id=4, first_entry_id=0, max_count=1, max_bytes=1)
    calls = [_UnaryCall() for _ in range(3)]
    for call in calls[:2]:
        await handler.unary(request, call)  # type: ignore[arg-type]
    assert budget.used > 2000
    third = asyncio.create_task(handler.unary(request, calls[2]))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not third.done()
    calls[0].end()
    await asyncio.wait_for(third, 5)
    calls[1].end()
    calls[2].end()
    assert budget.used == 0


async def test_read_again_for_want_of_room_neither_fences_nor_parks_again() -> None:
    servicer = _servicer(entry_bytes=1000, share=1500)
    core, budget = servicer.read_entry.core, servicer.read_entry.answer_bytes
    fences, waits = [], []
    fence, wait_for_lac = core.fence, core.wait_for_lac

    async def counted_fence(ledger_id: int, master_key: bytes) -> None:
        fences.append(ledger_id)
        await fence(ledger_id, master_key)

    async def counted_wait(ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        waits.append(timeout_s)
        return await wait_for_lac(ledger_id, previous_lac, timeout_s)

    core.fence, core.wait_for_lac = counted_fence, counted_wait  # type: ignore[method-assign]
    holder = _UnaryCall()
    await servicer.read_entry.unary(S.ReadRequest(ledger_id=4, entry_id=0), holder)  # type: ignore[arg-type]
    fencing = S.ReadRequest(ledger_id=4, entry_id=1, flags=S.FENCE_LEDGER, master_key=MASTER_KEY)
    poll = S.ReadRequest(ledger_id=4, entry_id=-1, previous_lac=0, timeout_ms=5000, flags=S.ENTRY_PIGGYBACK)
    core.ledgers[4].lac = 3  # type: ignore[attr-defined]
    calls = [_UnaryCall(), _UnaryCall()]
    tasks = [
        asyncio.create_task(servicer.read_entry.unary(r, call))  # type: ignore[arg-type]
        for r, call in zip((fencing, poll), calls, strict=True)
    ]
    await asyncio.sleep(0.05)
    assert (fences, len(waits)) == ([4], 1)  # served once each, then dropped: no room
    holder.end()  # room for one answer at a time: each call ends once answered
    answers, pending = [], set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert done, "a read waits for room that was given back"
        for task in done:
            answers.append(_read(task.result()))
            calls[tasks.index(task)].end()
    assert sorted((a.status, a.entry_id) for a in answers) == [(S.EOK, 1), (S.EOK, 1)]
    assert (fences, len(waits)) == ([4], 1)  # read again as plain reads
    assert budget.used == 0


async def test_a_request_that_ends_after_its_stream_closed_gives_its_bytes_back() -> None:
    # On Python 3.11 a task cancelled as its wait ends may go on, and post an answer to a stream
    # that is over: its bytes must not stay reserved for ever.
    servicer = _servicer(entry_bytes=1000, share=4000)
    stream = servicer.read_stream
    release = _gate_reads(servicer, {0}, stubborn=True)

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        yield S.ReadStreamRequest(request_id=1, read=S.ReadRequest(ledger_id=4, entry_id=0))
        await asyncio.Event().wait()

    answers = stream(requests(), None)  # type: ignore[arg-type]
    pending = asyncio.create_task(answers.__anext__())
    try:
        await asyncio.sleep(0.05)
        pending.cancel()  # the client went away while the read was in progress, as gRPC says it
        await asyncio.gather(pending, return_exceptions=True)
    finally:
        release.set()
    await asyncio.sleep(0.05)
    assert stream.answer_bytes.used == 0


async def test_an_answer_posted_after_the_client_half_closed_is_still_written() -> None:
    servicer = _servicer(entry_bytes=100, share=4000)
    stream = servicer.read_stream
    release = _gate_reads(servicer, {1})
    half_close = asyncio.Event()

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        for i in range(2):
            yield S.ReadStreamRequest(request_id=i, read=S.ReadRequest(ledger_id=4, entry_id=i))
        await half_close.wait()  # then the client sends no more requests

    answers = stream(requests(), None)  # type: ignore[arg-type]
    first = await answers.__anext__()  # the answer loop now waits in its yield (a slow write)
    half_close.set()  # meanwhile the requests end...
    await asyncio.sleep(0.01)
    release.set()  # ...and then the second request is answered
    await asyncio.sleep(0.01)
    rest = [answer async for answer in answers]
    assert [a.request_id for a in [first, *rest]] == [0, 1]
