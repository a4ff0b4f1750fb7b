"""``BookieClient.standing_stride_poll`` over a real loopback bookie service with an in-memory
core, its ReadStream over gRPC and over the add port: one request, an answer each time the LAC
moves, a cancel that frees the bookie's parked poll, and an error (not a hang) when the stream
breaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_requests import MASTER_KEY, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore

from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkclient.transport import StrideResult
from bkproto.errors import BookieUnavailableError, NoSuchLedgerError
from bkproto.v1 import bookie_pb2
from bookie.handlers import HandlerLimits
from bookie.service import BookieService
from bookie.stats import RequestStats

LEDGER = 31


class Bookie:
    def __init__(self, service: BookieService, client: BookieClient, stats: RequestStats) -> None:
        self.service = service
        self.client = client
        self.stats = stats

    def port_connections(self) -> int:
        return int(self.stats.add_port_connections()) if self.service.add_port is not None else 0

    async def add(self, *entries: tuple[int, int]) -> None:
        """Store ``(entry id, the LAC its body carries)`` pairs; the bookie learns each LAC."""
        for entry_id, lac in entries:
            await self.client.add(LEDGER, entry_id, MASTER_KEY, fake_entry(LEDGER, entry_id, lac))


@pytest.fixture(params=["grpc", "add port"])
async def bookie(request: pytest.FixtureRequest) -> AsyncIterator[Bookie]:
    # One long poll per peer: a standing poll that stayed parked on the bookie would refuse the next.
    limits = HandlerLimits(max_long_poll_ms=60_000, max_long_polls_per_peer=1)
    over_port = request.param == "add port"
    stats = RequestStats(CollectorRegistry())
    service = BookieService(FakeBookieCore(), stats, "127.0.0.1", 0, limits, add_port=0 if over_port else -1)
    await service.start()
    address = f"127.0.0.1:{service.port}"
    if over_port:
        options = BookieClientOptions(use_add_port=True, default_timeout_s=5.0)
        client = BookieClient(address, address, options, f"127.0.0.1:{service.add_port}", add_port_reads=True)
    else:
        client = BookieClient(address, address, BookieClientOptions(use_add_port=False))
    yield Bookie(service, client, stats)
    await client.close()
    await service.stop(0)


async def next_answer(poll: object) -> StrideResult:
    return await asyncio.wait_for(poll.next(), 5)  # type: ignore[attr-defined, no-any-return]


async def test_one_request_is_answered_as_the_lac_moves_until_its_count(bookie: Bookie) -> None:
    poll = bookie.client.standing_stride_poll(LEDGER, 0, 1, 4, 1 << 20, 30_000)
    await bookie.add((0, -1), (1, 0))
    first = await next_answer(poll)
    await bookie.add((2, 1))
    second = await next_answer(poll)
    await bookie.add((3, 2), (4, 3), (5, 4))  # LAC 4: past the poll's 4 entries
    rest = [await next_answer(poll)]
    while rest[-1].more:
        rest.append(await next_answer(poll))
    assert (first.bodies, first.max_lac, first.more) == ([fake_entry(LEDGER, 0)], 0, True)
    assert (second.bodies, second.more) == ([fake_entry(LEDGER, 1, 0)], True)
    bodies = [body for answer in rest for body in answer.bodies]
    assert bodies == [fake_entry(LEDGER, 2, 1), fake_entry(LEDGER, 3, 2)]
    # over the add port, the adds and the poll each hold a connection (nothing went over gRPC)
    assert bookie.port_connections() == (2 if bookie.client.add_port_reads else 0)


async def test_a_cancelled_standing_poll_is_released_on_the_bookie(bookie: Bookie) -> None:
    parked = bookie.client.standing_stride_poll(LEDGER, 0, 1, 100, 1 << 20, 30_000)
    waiting = asyncio.ensure_future(parked.next())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # nothing confirmed yet
    waiting.cancel()
    parked.cancel()
    await asyncio.sleep(0.2)
    # The bookie takes one parked poll from this peer: the next is only accepted if the first went.
    second = bookie.client.standing_stride_poll(LEDGER, 0, 1, 100, 1 << 20, 30_000)
    await bookie.add((0, -1), (1, 0))
    answer = await next_answer(second)
    assert (answer.bodies, answer.more) == ([fake_entry(LEDGER, 0)], True)


async def test_a_broken_stream_fails_a_waiting_standing_poll(bookie: Bookie) -> None:
    poll = bookie.client.standing_stride_poll(LEDGER, 0, 1, 100, 1 << 20, 30_000)
    waiting = asyncio.ensure_future(poll.next())
    await asyncio.sleep(0.2)
    await bookie.service.stop(0)
    with pytest.raises(BookieUnavailableError):
        await asyncio.wait_for(waiting, 5)


async def test_a_batched_read_goes_with_the_read_stream_and_names_the_bookie(bookie: Bookie) -> None:
    await bookie.add((0, -1), (1, 0), (2, 1), (3, 2))
    bodies = await bookie.client.read_entries(LEDGER, 0, 10, 1 << 20)
    strided = await bookie.client.read_entries(LEDGER, 1, 10, 1 << 20, stride=2)
    assert bodies == [fake_entry(LEDGER, e, e - 1) for e in range(4)]
    assert strided == [fake_entry(LEDGER, 1, 0), fake_entry(LEDGER, 3, 2)]
    with pytest.raises(NoSuchLedgerError, match=r"127\.0\.0\.1"):
        await bookie.client.read_entries(LEDGER + 1, 0, 10, 1 << 20)
    # over the add port the read stream carried them (adds and reads: one connection each)
    assert bookie.port_connections() == (2 if bookie.client.add_port_reads else 0)


async def test_a_bookie_that_refuses_batched_reads_on_its_stream_gets_them_as_unary_calls() -> None:
    # A bookie from before read_entries on the ReadStream refuses it as a request asking for
    # nothing, in a ReadEntry's shape: the client goes back to the unary call, and stays there.
    stats = RequestStats(CollectorRegistry())
    service = BookieService(FakeBookieCore(), stats, "127.0.0.1", 0, HandlerLimits(), add_port=0)
    await service.start()
    address = f"127.0.0.1:{service.port}"
    options = BookieClientOptions(use_add_port=True, default_timeout_s=5.0)
    client = BookieClient(address, address, options, f"127.0.0.1:{service.add_port}", add_port_reads=True)
    refused: list[int] = []

    async def older_bookie(request_id: int, request: object, stream: Any, context: object) -> None:
        refused.append(request_id)
        old = bookie_pb2.ReadResponse(status=bookie_pb2.EBADREQ, message="asks for nothing")
        stream.post(request_id, bookie_pb2.ReadStreamResponse(request_id=request_id, read=old))

    service.servicer.read_stream._read_batch = older_bookie  # type: ignore[method-assign]
    try:
        await client.add(LEDGER, 0, MASTER_KEY, fake_entry(LEDGER, 0))
        assert await client.read_entries(LEDGER, 0, 10, 1 << 20) == [fake_entry(LEDGER, 0)]
        assert await client.read_entries(LEDGER, 0, 10, 1 << 20) == [fake_entry(LEDGER, 0)]
        assert len(refused) == 1  # asked once over the stream, then by unary calls
    finally:
        await client.close()
        await service.stop(0)
