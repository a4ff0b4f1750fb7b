"""How the add port reads its socket: frames cut anywhere by TCP, several frames in one read, the
stream window and the receive budget stopping and resuming the reading, a peer that half-closes,
and shutdown with a message still held back. Real loopback TCP, in-memory core."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_port_peer import add_message, connect
from tests.support.add_requests import MASTER_KEY, add_request, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore

from bkproto.add_port import FRAME_HEADER, PREFACE
from bkproto.v1 import bookie_pb2
from bookie.handlers import HandlerLimits
from bookie.limits import ListenerLimits
from bookie.service import BookieService
from bookie.stats import RequestStats

pytestmark = pytest.mark.both_loops  # the add port's protocols on both loops (tests.support.event_loops)

S = bookie_pb2


@asynccontextmanager
async def bookie_with(
    limits: HandlerLimits | None = None, listener_limits: ListenerLimits | None = None
) -> AsyncIterator[tuple[BookieService, FakeBookieCore]]:
    core = FakeBookieCore()
    service = BookieService(
        core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, limits, add_port=0,
        listener_limits=listener_limits,
    )
    await service.start()
    try:
        yield service, core
    finally:
        await service.stop(0)


def entry_ids(responses: list[bookie_pb2.AddEntriesResponse | None]) -> list[int]:
    return [r.entry_id for response in responses if response is not None for r in response.results]


async def test_a_preface_and_frames_cut_into_single_bytes_are_answered() -> None:
    async with bookie_with() as (bookie, core):
        conn = await connect(bookie, preface=b"")
        data = PREFACE + add_message(add_request(1, 0)) + add_message(add_request(1, 1), add_request(1, 2))
        await conn.send_in_pieces(data, 1)
        responses = [await conn.receive(), await conn.receive()]
        assert entry_ids(responses) == [0, 1, 2]
        assert all(r.status == S.EOK for response in responses if response for r in response.results)
        assert core.add_calls == [1, 2]
        assert [core.ledgers[1].entries[e] for e in range(3)] == [fake_entry(1, e) for e in range(3)]


async def test_frames_arriving_in_one_read_are_each_a_batch_answered_in_order() -> None:
    async with bookie_with() as (bookie, core):
        conn = await connect(bookie)
        conn.writer.write(b"".join(add_message(add_request(2, e)) for e in range(10)))
        responses = [await conn.receive() for _ in range(10)]
        assert entry_ids(responses) == list(range(10))
        assert core.add_calls == [1] * 10


async def test_frames_read_together_wait_at_the_window_then_go_on() -> None:
    async with bookie_with(HandlerLimits(add_stream_window=3)) as (bookie, core):
        core.add_gate = asyncio.Event()
        conn = await connect(bookie)
        conn.writer.write(b"".join(add_message(add_request(3, e)) for e in range(7)))
        await core.wait_for_add_calls(3)
        await asyncio.sleep(0.1)
        assert len(core.add_calls) == 3  # the rest wait, read or not, until answers make room
        core.add_gate.set()
        responses = [await conn.receive() for _ in range(7)]
        assert entry_ids(responses) == list(range(7))


async def test_a_frame_waiting_for_receive_budget_goes_on_once_bytes_are_freed() -> None:
    payload = b"p" * 3000  # a message of about 3.1 kB; two of one peer do not fit its 5,000 bytes
    limits = ListenerLimits(max_buffered_bytes=5000, max_buffered_bytes_per_peer=5000)

    def add(ledger_id: int, entry_id: int) -> bookie_pb2.AddRequest:
        body = fake_entry(ledger_id, entry_id, payload=payload)
        return bookie_pb2.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=MASTER_KEY, body=body)

    async with bookie_with(HandlerLimits(add_stream_window=1), limits) as (bookie, core):
        core.add_gate = asyncio.Event()
        first = await connect(bookie)
        await first.send(add(4, 0))
        await first.send(add(4, 1))  # held at the window: its bytes stay reserved
        await core.wait_for_add_calls(1)
        second = await connect(bookie)
        await second.send(add(5, 0))  # its header finds no room in the peer's receive budget
        await asyncio.sleep(0.1)
        assert core.add_calls == [1]
        core.add_gate.set()
        assert entry_ids([await first.receive(), await first.receive()]) == [0, 1]
        answer = await second.receive()
        assert answer is not None and [r.status for r in answer.results] == [S.EOK]
        assert core.ledgers[5].entries[0] == fake_entry(5, 0, payload=payload)


def big_add(ledger_id: int, entry_id: int) -> bookie_pb2.AddRequest:
    """An add of about 3.1 kB: two do not fit in a budget of 5,000 bytes."""
    body = fake_entry(ledger_id, entry_id, payload=b"p" * 3000)
    return bookie_pb2.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=MASTER_KEY, body=body)


async def test_frames_waiting_for_the_receive_budget_are_read_in_their_turn() -> None:
    limits = ListenerLimits(max_buffered_bytes=5000, max_buffered_bytes_per_peer=5000)
    async with bookie_with(listener_limits=limits) as (bookie, core):
        holder = await connect(bookie)
        message = add_message(big_add(10, 0))
        holder.writer.write(message[:100])  # its header reserves the message's 3.1 kB
        await asyncio.sleep(0.05)
        large = await connect(bookie)
        await large.send(big_add(11, 0))  # does not fit: waits for the holder's bytes
        await asyncio.sleep(0.05)
        small = await connect(bookie)
        await small.send(add_request(12, 0))  # would fit, but the large frame came first
        await asyncio.sleep(0.1)
        assert set(core.ledgers) == set()
        holder.writer.write(message[100:])
        answers = [await conn.receive() for conn in (holder, large, small)]
        assert all(a is not None and a.results[0].status == S.EOK for a in answers)
        assert list(core.ledgers) == [10, 11, 12]  # in the order the frames came
        waiting = await connect(bookie)  # one that gives up while it waits holds nothing after
        holder.writer.write(message[:100])
        await asyncio.sleep(0.05)
        await waiting.send(big_add(13, 0))
        await asyncio.sleep(0.05)
        waiting.writer.close()
        holder.writer.close()
        for _ in range(100):
            if bookie.add_port_connections == 2:
                break
            await asyncio.sleep(0.01)
        assert bookie.add_port_connections == 2  # large and small, still open
        assert bookie.add_port_buffered_bytes == 0


async def test_an_empty_frame_waits_for_no_one_and_every_close_gives_its_bytes_back() -> None:
    # An empty frame reserves nothing. Queued behind a waiting frame, it once left the peer's
    # count at zero bytes, and giving those zero bytes back on close raised and left the
    # connection counted.
    limits = ListenerLimits(max_buffered_bytes=5000, max_buffered_bytes_per_peer=5000)
    async with bookie_with(listener_limits=limits) as (bookie, _core):
        holder = await connect(bookie)
        holder.writer.write(add_message(big_add(17, 0))[:100])  # holds 3.1 kB
        await asyncio.sleep(0.05)
        waiting = await connect(bookie)
        await waiting.send(big_add(18, 0))  # does not fit: waits
        await asyncio.sleep(0.05)
        empty = await connect(bookie)
        empty.writer.write(FRAME_HEADER.pack(0))  # an AddEntries message of no adds
        answer = await empty.receive()
        assert answer is not None and not answer.results
        for conn in (holder, waiting, empty):  # all at once, the holder first
            conn.writer.close()
        for _ in range(100):
            if not bookie.add_port_connections:
                break
            await asyncio.sleep(0.01)
        assert bookie.add_port_connections == 0
        assert bookie.add_port_buffered_bytes == 0


async def test_messages_waiting_for_the_in_progress_budget_start_in_their_turn() -> None:
    limits = HandlerLimits(add_in_progress_max_bytes=5000, add_in_progress_max_bytes_per_peer=5000)
    async with bookie_with(limits) as (bookie, core):
        core.add_gate = asyncio.Event()
        first, large, small = await connect(bookie), await connect(bookie), await connect(bookie)
        await first.send(big_add(14, 0))
        await core.wait_for_add_calls(1)
        await large.send(big_add(15, 0))  # waits for the first batch's bytes
        await asyncio.sleep(0.05)
        await small.send(add_request(16, 0))  # would fit, but the large message came first
        await asyncio.sleep(0.1)
        assert core.add_calls == [1]
        core.add_gate.set()
        answers = [await conn.receive() for conn in (first, large, small)]
        assert all(a is not None and a.results[0].status == S.EOK for a in answers)
        assert list(core.ledgers) == [14, 15, 16]
        budgets = bookie.servicer.add_entries
        assert budgets.budget.used == budgets.unanswered.used == 0


async def test_a_peer_that_half_closes_gets_its_answers_then_the_close() -> None:
    async with bookie_with() as (bookie, _core):
        conn = await connect(bookie)
        conn.writer.write(add_message(add_request(6, 0)) + add_message(add_request(6, 1)))
        conn.writer.write_eof()
        assert entry_ids([await conn.receive(), await conn.receive()]) == [0, 1]
        assert await conn.receive() is None


async def test_shutdown_answers_the_started_batch_and_drops_the_one_held_at_the_window() -> None:
    async with bookie_with(HandlerLimits(add_stream_window=1)) as (bookie, core):
        core.add_gate = asyncio.Event()
        conn = await connect(bookie)
        conn.writer.write(add_message(add_request(7, 0)) + add_message(add_request(7, 1)))
        await core.wait_for_add_calls(1)
        stopping = asyncio.ensure_future(bookie.stop(10))
        await asyncio.sleep(0.1)
        core.add_gate.set()
        assert entry_ids([await conn.receive()]) == [0]
        assert await conn.receive() is None
        await stopping
        assert core.add_calls == [1]
        assert bookie.add_port_connections == 0


async def test_a_batch_in_slices_is_answered_whole_while_another_stream_goes_on() -> None:
    async with bookie_with(HandlerLimits(adds_per_loop_turn=2)) as (bookie, core):
        big, small = await connect(bookie), await connect(bookie)
        await big.send(*(add_request(8, e) for e in range(7)))  # four slices, a loop turn apart
        await small.send(add_request(9, 0))
        answer, other = await big.receive(), await small.receive()
        assert answer is not None and entry_ids([answer]) == list(range(7))
        assert all(r.status == S.EOK for r in answer.results)
        assert other is not None and entry_ids([other]) == [0]
        assert sorted(core.add_calls) == [1, 1, 2, 2, 2]
