"""The ReadStream over the bookie's add port, over real loopback TCP with an in-memory core: the
same answers as the gRPC ReadStream (standing polls included), a fencing read refused, and a
request too large or a reader that leaves its answers unread closed without hurting the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_port_peer import Connection, connect
from tests.support.add_requests import MASTER_KEY, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore

from bkproto.add_port import FRAME_HEADER, MAX_READ_REQUEST_BYTES, READ_PREFACE
from bkproto.v1 import bookie_pb2
from bookie.handlers import HandlerLimits
from bookie.limits import ListenerLimits
from bookie.service import BookieService
from bookie.stats import RequestStats

pytestmark = pytest.mark.both_loops  # the add port's protocols on both loops (tests.support.event_loops)

S = bookie_pb2
LEDGER = 5


class Bookie:
    def __init__(self, service: BookieService, registry: CollectorRegistry) -> None:
        self.service = service
        self.registry = registry

    async def add(self, *entries: tuple[int, int], payload: bytes = b"payload") -> None:
        """Store ``(entry id, the LAC its body carries)`` pairs over the add port."""
        adds = [
            S.AddRequest(
                ledger_id=LEDGER, entry_id=e, master_key=MASTER_KEY, body=fake_entry(LEDGER, e, lac, payload)
            )
            for e, lac in entries
        ]
        writer = await connect(self.service)
        await writer.send(*adds)
        answer = await writer.receive()
        assert answer is not None and [r.status for r in answer.results] == [S.EOK] * len(adds)
        writer.writer.close()

    def rejections(self, limit: str) -> float | None:
        return self.registry.get_sample_value(
            "bookkeeper_server_LIMIT_REJECTIONS_total", {"listener": "add_port", "limit": limit}
        )


async def start(listener_limits: ListenerLimits | None = None, long_polls_per_peer: int = 2500) -> Bookie:
    registry = CollectorRegistry()
    limits = HandlerLimits(
        max_long_poll_ms=60_000, read_stream_max_in_flight=4, max_long_polls_per_peer=long_polls_per_peer
    )
    service = BookieService(
        FakeBookieCore(), RequestStats(registry), "127.0.0.1", 0, limits, add_port=0,
        listener_limits=listener_limits,
    )  # fmt: skip
    await service.start()
    return Bookie(service, registry)


@pytest.fixture
async def bookie() -> AsyncIterator[Bookie]:
    b = await start()
    yield b
    await b.service.stop(0)


def standing(request_id: int, first: int, max_count: int) -> S.ReadStreamRequest:
    poll = S.StridePollRequest(
        ledger_id=LEDGER, first_entry_id=first, stride=1, max_count=max_count,
        max_bytes=1 << 20, timeout_ms=30_000, standing=True,
    )  # fmt: skip
    return S.ReadStreamRequest(request_id=request_id, stride_poll=poll)


def read(request_id: int, entry_id: int, flags: int = 0) -> S.ReadStreamRequest:
    request = S.ReadRequest(ledger_id=LEDGER, entry_id=entry_id, flags=flags, master_key=MASTER_KEY)
    return S.ReadStreamRequest(request_id=request_id, read=request)


async def answer_of(reads: Connection) -> S.ReadStreamResponse:
    answer = await reads.receive_read()
    assert answer is not None, "the bookie closed the read connection"
    return answer


async def test_a_standing_poll_is_answered_over_the_add_port_as_the_lac_moves(bookie: Bookie) -> None:
    reads = await connect(bookie.service, READ_PREFACE)
    await reads.send_read(standing(7, 0, 3))
    await bookie.add((0, -1), (1, 0))
    first = await answer_of(reads)
    await bookie.add((2, 1), (3, 2))
    second = await answer_of(reads)
    assert (first.request_id, list(first.stride_poll.bodies), first.stride_poll.more) == (
        7, [fake_entry(LEDGER, 0)], True
    )
    assert (second.request_id, list(second.stride_poll.bodies), second.stride_poll.more) == (
        7, [fake_entry(LEDGER, 1, 0), fake_entry(LEDGER, 2, 1)], False
    )
    # the stream goes on: a plain read on the same connection
    await reads.send_read(read(8, 3))
    third = await answer_of(reads)
    assert (third.request_id, third.read.status, third.read.body) == (8, S.EOK, fake_entry(LEDGER, 3, 2))


async def test_a_fencing_read_is_refused_and_the_stream_goes_on(bookie: Bookie) -> None:
    await bookie.add((0, -1))
    reads = await connect(bookie.service, READ_PREFACE)
    await reads.send_read(read(1, 0, S.FENCE_LEDGER), read(2, 0))
    answers = {a.request_id: a for a in [await answer_of(reads), await answer_of(reads)]}
    assert answers[1].read.status == S.EBADREQ
    assert "fencing read" in answers[1].read.message and "gRPC" in answers[1].read.message
    assert (answers[2].read.status, answers[2].read.body) == (S.EOK, fake_entry(LEDGER, 0))


async def test_an_oversized_request_closes_its_connection_only(
    bookie: Bookie, caplog: pytest.LogCaptureFixture
) -> None:
    await bookie.add((0, -1))
    healthy = await connect(bookie.service, READ_PREFACE)
    caplog.set_level(logging.WARNING, logger="bookie.add_port")
    bad = await connect(bookie.service, READ_PREFACE)
    bad.writer.write(FRAME_HEADER.pack(MAX_READ_REQUEST_BYTES + 1) + b"\0" * 1024)
    assert await asyncio.wait_for(bad.reader.read(), 5) == b""
    assert f"exceeds the {MAX_READ_REQUEST_BYTES}-byte limit" in caplog.text
    assert bookie.rejections("frame_bytes") == 1
    await healthy.send_read(read(1, 0))
    assert (await answer_of(healthy)).read.body == fake_entry(LEDGER, 0)


async def test_bytes_that_are_no_read_request_close_the_connection(
    bookie: Bookie, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bookie.add_port")
    bad = await connect(bookie.service, READ_PREFACE)
    bad.writer.write(FRAME_HEADER.pack(4) + b"\xff\xff\xff\xff")
    assert await asyncio.wait_for(bad.reader.read(), 5) == b""
    assert "ending the stream" in caplog.text


async def test_a_reader_that_leaves_its_answers_unread_is_closed_and_others_are_served() -> None:
    bookie = await start(ListenerLimits(write_timeout_s=0.5))
    try:
        big = b"x" * (256 * 1024)
        await bookie.add((0, -1), payload=big)
        hoarder = await connect(bookie.service, READ_PREFACE)
        # 64 MiB of answers asked for, none read: far past what the sockets buffer
        await hoarder.send_read(*(read(i, 0) for i in range(1, 257)))
        healthy = await connect(bookie.service, READ_PREFACE)
        await healthy.send_read(read(1, 0))
        assert (await answer_of(healthy)).read.body == fake_entry(LEDGER, 0, payload=big)
        for _ in range(100):
            if bookie.rejections("write_timeout"):
                break
            await asyncio.sleep(0.1)
        assert bookie.rejections("write_timeout") == 1
        # it stopped being served once its answers backed up: not all its reads were read
        served = bookie.registry.get_sample_value(
            "bookkeeper_server_READ_ENTRY_REQUEST_count", {"success": "true"}
        )
        assert served is not None and served < 128, served
        hoarder.writer.close()
    finally:
        await bookie.service.stop(0)


async def test_the_end_of_a_read_connection_cancels_its_parked_polls() -> None:
    bookie = await start(long_polls_per_peer=1)  # one parked poll per peer
    service = bookie.service
    try:
        leaving = await connect(service, READ_PREFACE)
        await leaving.send_read(standing(1, 0, 5))
        await asyncio.sleep(0.2)  # parked: the peer's one long poll
        leaving.writer.write_eof()
        assert await asyncio.wait_for(leaving.reader.read(), 5) == b""
        # Its poll is gone: the next one from this peer parks and is answered, not refused.
        staying = await connect(service, READ_PREFACE)
        await staying.send_read(standing(1, 0, 1))
        await asyncio.sleep(0.2)
        await bookie.add((0, -1), (1, 0))
        answer = await answer_of(staying)
        polled = answer.stride_poll
        assert (polled.status, list(polled.bodies)) == (S.EOK, [fake_entry(LEDGER, 0)])
    finally:
        await service.stop(0)


async def test_long_polls_over_the_port_count_against_the_peer_and_under_the_port() -> None:
    bookie = await start(long_polls_per_peer=1)  # one parked poll per peer
    service = bookie.service
    try:
        reads = await connect(service, READ_PREFACE)
        await reads.send_read(standing(1, 0, 5))
        await asyncio.sleep(0.2)  # parked: the peer's one long poll
        await reads.send_read(standing(2, 0, 5))
        refused = await answer_of(reads)
        assert (refused.request_id, refused.stride_poll.status) == (2, S.ETOOMANYREQUESTS)
        assert bookie.rejections("long_polls_per_ip") == 1
    finally:
        await service.stop(0)


async def test_a_batched_read_is_answered_over_the_add_port_small_or_large(bookie: Bookie) -> None:
    big = b"x" * 8192  # 20 of them: an answer the connection writes in two parts (head, then data)
    await bookie.add(*((e, e - 1) for e in range(20)), payload=big)
    reads = await connect(bookie.service, READ_PREFACE)
    batch = S.ReadEntriesRequest(ledger_id=LEDGER, first_entry_id=0, max_count=100, max_bytes=1 << 20)
    small = S.ReadEntriesRequest(ledger_id=LEDGER, first_entry_id=3, max_count=2, stride=5)
    await reads.send_read(
        S.ReadStreamRequest(request_id=1, read_entries=batch),
        S.ReadStreamRequest(request_id=2, read_entries=small),
    )
    answers = {a.request_id: a.read_entries for a in [await answer_of(reads), await answer_of(reads)]}
    assert list(answers[1].bodies) == [fake_entry(LEDGER, e, e - 1, big) for e in range(20)]
    assert (answers[1].status, answers[1].max_lac) == (S.EOK, 18)
    assert list(answers[2].bodies) == [fake_entry(LEDGER, 3, 2, big), fake_entry(LEDGER, 8, 7, big)]
    budget = bookie.service.servicer.read_stream.answer_bytes
    for _ in range(100):  # given back once the answer loop goes on past the written answer
        if budget.used == 0:
            break
        await asyncio.sleep(0.01)
    assert budget.used == 0
