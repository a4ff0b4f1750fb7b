"""BookieClient against an in-process gRPC server that speaks the bookie protocol from memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import grpc.aio
import pytest
from tests.support.memory_cluster import MemoryBookie as InMemoryBookie

from bkclient.bookie_client import AddRequestEncoder, BookieClient, BookieClientOptions
from bkclient.config import ClientConfig
from bkclient.context import pool_for
from bkclient.transport import BookieAddress, BookieConnectionPool
from bkproto.errors import (
    BKError,
    BookieUnavailableError,
    ClientClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    TimeoutError,
)
from bkproto.grpc_add_stream import ACCEPTED
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

FENCED_LEDGER = 13
KEY = b"k" * 20


class MemoryBookie(bookie_pb2_grpc.BookieServicer):
    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.flags: dict[tuple[int, int], int] = {}
        self.message_sizes: list[int] = []
        self.got_message = asyncio.Event()
        self.hold = asyncio.Event()  # cleared: responses wait
        self.hold.set()
        self.abort_after_messages: int | None = None
        self.reads: list[bookie_pb2.ReadRequest] = []
        self.read_gate = asyncio.Event()
        self.read_gate.set()
        self.entry_gates: dict[int, asyncio.Event] = {}  # entry id -> its reads wait for this
        self.cancelled: list[int] = []  # ReadStream request ids the client withdrew
        self.read_streams = 0
        self.break_read_streams = False

    async def AddEntries(
        self, request_iterator: AsyncIterator[bookie_pb2.AddEntriesRequest], context: Any
    ) -> AsyncIterator[bookie_pb2.AddEntriesResponse]:
        await context.send_initial_metadata((ACCEPTED,))  # the call is taken, as a bookie says
        # Like a real bookie, keep reading requests while earlier ones are still being answered.
        received: asyncio.Queue[bookie_pb2.AddEntriesRequest | None] = asyncio.Queue()

        async def reader() -> None:
            async for request in request_iterator:
                self.message_sizes.append(len(request.adds) + sum(len(g.entry_ids) for g in request.packed))
                self.got_message.set()
                received.put_nowait(request)
            received.put_nowait(None)

        reading = asyncio.create_task(reader())
        try:
            while (request := await received.get()) is not None:
                limit = self.abort_after_messages
                if limit is not None and len(self.message_sizes) >= limit:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "bookie going down")
                await self.hold.wait()
                yield self._apply(request)
        finally:
            reading.cancel()

    async def wait_for_messages(self, count: int) -> None:
        """Until ``count`` request messages have arrived in all."""
        while len(self.message_sizes) < count:
            self.got_message.clear()
            await self.got_message.wait()

    def _apply(self, request: bookie_pb2.AddEntriesRequest) -> bookie_pb2.AddEntriesResponse:
        """One result per add: every ``adds`` element, then each packed group's adds."""
        response = bookie_pb2.AddEntriesResponse()
        adds = list(request.adds)
        for group in request.packed:
            offset = 0
            for entry_id, size in zip(group.entry_ids, group.body_sizes, strict=True):
                body = group.bodies[offset : offset + size]
                offset += size
                adds.append(bookie_pb2.AddRequest(
                    ledger_id=group.ledger_id, entry_id=entry_id, master_key=group.master_key, body=body,
                    flags=group.flags,
                ))
        for add in adds:
            if add.ledger_id == FENCED_LEDGER and not add.flags & bookie_pb2.RECOVERY_ADD:
                response.results.add(status=bookie_pb2.EFENCED, message="fenced")
                continue
            self.entries[(add.ledger_id, add.entry_id)] = add.body
            self.flags[(add.ledger_id, add.entry_id)] = add.flags
            response.results.add(status=bookie_pb2.EOK, ledger_id=add.ledger_id, entry_id=add.entry_id)
        return response

    async def ReadEntry(self, request: bookie_pb2.ReadRequest, context: Any) -> bookie_pb2.ReadResponse:
        self.reads.append(request)
        await self.read_gate.wait()
        body = self.entries.get((request.ledger_id, request.entry_id))
        if body is None:
            return bookie_pb2.ReadResponse(status=bookie_pb2.ENOENTRY, message="no such entry")
        return bookie_pb2.ReadResponse(status=bookie_pb2.EOK, body=body, max_lac=request.entry_id)

    async def ReadStream(
        self, request_iterator: AsyncIterator[bookie_pb2.ReadStreamRequest], context: Any
    ) -> AsyncIterator[bookie_pb2.ReadStreamResponse]:
        self.read_streams += 1
        answers: asyncio.Queue[bookie_pb2.ReadStreamResponse] = asyncio.Queue()
        running: dict[int, asyncio.Task[None]] = {}

        async def serve(request_id: int, read: bookie_pb2.ReadRequest) -> None:
            gate = self.entry_gates.get(read.entry_id)
            if gate is not None:
                await gate.wait()
            response = await self.ReadEntry(read, context)
            answers.put_nowait(bookie_pb2.ReadStreamResponse(request_id=request_id, read=response))

        async def reader() -> None:
            async for message in request_iterator:
                if message.cancel:
                    self.cancelled.append(message.request_id)
                    running.pop(message.request_id).cancel()
                else:
                    running[message.request_id] = asyncio.create_task(serve(message.request_id, message.read))

        reading = asyncio.create_task(reader())
        try:
            while True:
                answer = await answers.get()
                if self.break_read_streams:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "bookie going down")
                yield answer
        finally:
            reading.cancel()
            for task in running.values():
                task.cancel()

    async def ReadEntries(
        self, request: bookie_pb2.ReadEntriesRequest, context: Any
    ) -> bookie_pb2.ReadEntriesResponse:
        bodies = []
        eid = request.first_entry_id
        while len(bodies) < request.max_count and (request.ledger_id, eid) in self.entries:
            bodies.append(self.entries[(request.ledger_id, eid)])
            eid += 1
        return bookie_pb2.ReadEntriesResponse(status=bookie_pb2.EOK, bodies=bodies, max_lac=eid - 1)

    async def ReadLac(self, request: bookie_pb2.ReadLacRequest, context: Any) -> bookie_pb2.ReadLacResponse:
        return bookie_pb2.ReadLacResponse(status=bookie_pb2.EOK)

    async def WriteLac(
        self, request: bookie_pb2.WriteLacRequest, context: Any
    ) -> bookie_pb2.WriteLacResponse:
        return bookie_pb2.WriteLacResponse(status=bookie_pb2.EUA, message="bad key")

    async def GetBookieInfo(
        self, request: bookie_pb2.GetBookieInfoRequest, context: Any
    ) -> bookie_pb2.GetBookieInfoResponse:
        return bookie_pb2.GetBookieInfoResponse(
            status=bookie_pb2.EOK, total_disk_capacity=100, free_disk_space=40
        )


@pytest.fixture
async def bookie() -> AsyncIterator[tuple[MemoryBookie, str]]:
    servicer = MemoryBookie()
    server = grpc.aio.server()
    bookie_pb2_grpc.add_BookieServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(None)


async def test_adds_complete_with_per_add_status(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    ok = [client.add(1, i, b"k" * 20, b"body%d" % i) for i in range(5)]
    fenced = client.add(FENCED_LEDGER, 0, b"k" * 20, b"x")
    recovered = client.add(FENCED_LEDGER, 1, b"k" * 20, b"y", recovery=True)
    await asyncio.gather(*ok)
    with pytest.raises(LedgerFencedError):
        await fenced
    await recovered
    assert servicer.entries[(1, 3)] == b"body3"
    assert servicer.flags[(FENCED_LEDGER, 1)] == bookie_pb2.RECOVERY_ADD
    await client.close()


class RecordingListener:
    """Which tokens completed, and how."""

    def __init__(self, expected: int) -> None:
        self.done: list[tuple[int, str | None]] = []
        self.expected = expected
        self.all_done = asyncio.Event()

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        self.done.append((token, None if error is None else type(error).__name__))
        if len(self.done) >= self.expected:
            self.all_done.set()

    def adds_completed(self, bookie_id: str, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.add_complete(bookie_id, token, None)


async def test_bodies_of_several_ledgers_and_serialized_adds_share_a_message_each_answer_to_its_add(
    bookie: tuple[MemoryBookie, str],
) -> None:
    """Adds queued while a message is out: bodies of two ledgers interleaved (each packed into its
    ledger's group) and a serialized add (an ``adds`` element) go in one message, and each answer
    reaches its own add although the bookie answers the ``adds`` first, then group by group."""
    servicer, address = bookie
    options = BookieClientOptions(max_inflight_messages=1, max_inflight_messages_keeping_up=1)
    client = BookieClient(address, address, options)
    servicer.hold.clear()
    first = client.add(1, 0, KEY, b"a")
    await servicer.got_message.wait()
    ours, fenced = RecordingListener(3), RecordingListener(2)
    ledger, fenced_ledger = AddRequestEncoder(7, KEY), AddRequestEncoder(FENCED_LEDGER, KEY)
    client.add_bodies(ledger, [b"b0", b"b1"], ours, [0, 1])
    client.add_bodies(fenced_ledger, [b"f5"], fenced, [5])
    lone = client.add(9, 3, KEY, b"lone")
    client.add_bodies(ledger, [b"b2"], ours, [2])
    client.add_bodies(fenced_ledger, [b"f6"], fenced, [6])
    servicer.hold.set()
    await asyncio.gather(first, lone, ours.all_done.wait(), fenced.all_done.wait())
    assert servicer.message_sizes == [1, 6]
    assert sorted(ours.done) == [(0, None), (1, None), (2, None)]
    assert sorted(fenced.done) == [(5, "LedgerFencedError"), (6, "LedgerFencedError")]
    assert [servicer.entries[(7, e)] for e in range(3)] == [b"b0", b"b1", b"b2"]
    assert servicer.entries[(9, 3)] == b"lone"
    await client.close()


async def test_adds_queued_while_a_message_is_in_flight_share_the_next_message(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    options = BookieClientOptions(max_inflight_messages=1, max_inflight_messages_keeping_up=1)
    client = BookieClient(address, address, options)
    servicer.hold.clear()
    first = client.add(1, 0, b"k" * 20, b"a")
    await servicer.got_message.wait()
    rest = [client.add(1, i, b"k" * 20, b"b") for i in range(1, 51)]
    await asyncio.sleep(0.05)
    assert servicer.message_sizes == [1]  # the window of one message is full: the rest waits
    servicer.hold.set()
    await asyncio.gather(first, *rest)
    assert servicer.message_sizes == [1, 50]
    await client.close()


async def test_a_bookie_behind_gets_at_most_one_message_per_batch_interval(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    options = BookieClientOptions(
        min_batch_interval_s=0.3, behind_min_adds=2, max_inflight_messages_keeping_up=1
    )
    client = BookieClient(address, address, options)
    servicer.hold.clear()
    adds = [client.add(2, 0, b"k" * 20, b"a")]
    await servicer.got_message.wait()
    adds += [client.add(2, i, b"k" * 20, b"b") for i in range(1, 6)]  # queued while it is out
    servicer.hold.set()
    for burst in range(10):  # a steady writer: adds keep coming while the next message waits
        adds += [client.add(2, 6 + 3 * burst + i, b"k" * 20, b"c") for i in range(3)]
        await asyncio.sleep(0.005)
    await asyncio.gather(*adds)
    # Five adds queued during the first round trip: the bookie is behind, so the next message
    # waits out the interval and takes every add that came meanwhile.
    assert servicer.message_sizes == [1, 35]
    await client.close()


async def test_adds_that_trickle_in_and_a_lone_add_are_not_held_back(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    patient = BookieClient(address, address, BookieClientOptions(min_batch_interval_s=60.0))
    for i in range(3):  # each add alone, just after the previous message: none waits 60 s
        await asyncio.wait_for(patient.add(1, i, b"k" * 20, b"a"), 5)
    assert servicer.message_sizes == [1, 1, 1]
    adds = []
    for burst in range(10):  # fewer adds per round trip than behind_min_adds (16)
        adds += [patient.add(1, 3 + 3 * burst + i, b"k" * 20, b"b") for i in range(3)]
        await asyncio.sleep(0.005)
    await asyncio.wait_for(asyncio.gather(*adds), 5)  # held back, they would wait 60 s
    assert sum(servicer.message_sizes) == 33
    await patient.close()


async def test_a_bookie_keeping_up_gets_a_second_message_while_one_is_out_and_one_behind_does_not(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    options = BookieClientOptions(
        max_inflight_messages=1, max_inflight_messages_keeping_up=2, behind_min_adds=4
    )
    client = BookieClient(address, address, options)
    try:
        servicer.hold.clear()
        adds = [client.add(1, 0, b"k" * 20, b"a")]
        await servicer.got_message.wait()
        adds.append(client.add(1, 1, b"k" * 20, b"b"))  # keeping up: it need not wait for the first
        await asyncio.wait_for(servicer.wait_for_messages(2), 10)
        adds += [client.add(1, i, b"k" * 20, b"c") for i in range(2, 7)]  # a third waits: window of 2
        await asyncio.sleep(0.05)
        assert servicer.message_sizes == [1, 1]
        servicer.hold.set()
        await asyncio.gather(*adds)
        # Five adds were queued when the first answer came: the bookie was behind, so they left in
        # one message once the second was answered, not one by one.
        assert servicer.message_sizes == [1, 1, 5]
        # Nothing was queued when that one was answered: it keeps up again, two messages go out.
        servicer.hold.clear()
        again = [client.add(1, 7, b"k" * 20, b"d")]
        await servicer.wait_for_messages(4)
        again.append(client.add(1, 8, b"k" * 20, b"e"))
        await asyncio.wait_for(servicer.wait_for_messages(5), 10)
        assert servicer.message_sizes == [1, 1, 5, 1, 1]
        servicer.hold.set()
        await asyncio.gather(*again)
    finally:
        servicer.hold.set()  # a failed check must not leave the fake's answers held
        await client.close()


async def test_in_flight_messages_are_bounded_by_the_window(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address, BookieClientOptions(max_inflight_messages=3))
    servicer.hold.clear()
    futures = []
    for i in range(10):
        futures.append(client.add(1, i, b"k" * 20, b"x"))
        await asyncio.sleep(0.02)  # each add leaves alone if the window allows
    assert len(servicer.message_sizes) == 3
    servicer.hold.set()
    await asyncio.gather(*futures)
    assert sum(servicer.message_sizes) == 10
    await client.close()


async def test_batches_respect_the_byte_budget(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address, BookieClientOptions(max_batch_bytes=1000))
    await asyncio.gather(*(client.add(1, i, b"k" * 20, b"z" * 400) for i in range(6)))
    assert servicer.message_sizes == [2, 2, 2]
    await client.close()


async def test_stream_failure_fails_every_pending_add_and_next_add_reconnects(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    client = BookieClient(address, address, BookieClientOptions(max_inflight_messages=1))
    servicer.abort_after_messages = 1
    servicer.hold.clear()
    futures = [client.add(1, 0, b"k" * 20, b"a")]
    await servicer.got_message.wait()
    futures += [client.add(1, i, b"k" * 20, b"b") for i in range(1, 4)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, BookieUnavailableError) for r in results), results
    servicer.abort_after_messages = None
    servicer.hold.set()
    await client.add(1, 9, b"k" * 20, b"again")
    assert servicer.entries[(1, 9)] == b"again"
    assert client.streams_opened >= 2  # a broken stream is never reused
    await client.close()


async def test_unreachable_bookie_is_unavailable() -> None:
    client = BookieClient("dead", "127.0.0.1:1")
    with pytest.raises(BookieUnavailableError):
        await client.add(1, 0, b"k" * 20, b"a")
    with pytest.raises(BookieUnavailableError):
        await client.read_entry(1, 0, timeout=5)
    await client.close()


async def test_read_entry_forwards_fence_and_long_poll_fields(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    await client.add(1, 4, b"k" * 20, b"four")
    result = await client.read_entry(
        1, 4, fence_master_key=b"m" * 20, previous_lac=3, long_poll_timeout_ms=500, piggyback=True
    )
    assert result.body == b"four"
    assert result.max_lac == 4
    request = servicer.reads[-1]
    assert request.flags == bookie_pb2.FENCE_LEDGER | bookie_pb2.ENTRY_PIGGYBACK
    assert request.master_key == b"m" * 20
    assert request.HasField("previous_lac")
    assert (request.previous_lac, request.timeout_ms) == (3, 500)
    plain = await client.read_entry(1, 4)
    assert plain.body == b"four"
    assert not servicer.reads[-1].HasField("previous_lac")
    with pytest.raises(NoSuchEntryError):
        await client.read_entry(1, 5)
    await client.close()


async def test_long_polls_share_one_stream_and_complete_out_of_order(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    await asyncio.gather(*(client.add(3, i, b"k" * 20, b"e%d" % i) for i in range(3)))
    servicer.entry_gates = {i: asyncio.Event() for i in range(3)}
    polls = [
        asyncio.ensure_future(client.read_entry(3, i, previous_lac=i - 1, long_poll_timeout_ms=5000))
        for i in range(3)
    ]
    servicer.entry_gates[2].set()
    assert (await polls[2]).body == b"e2"
    assert not polls[0].done() and not polls[1].done()  # a parked poll holds up no other
    servicer.entry_gates[0].set()
    servicer.entry_gates[1].set()
    assert [(await p).body for p in polls[:2]] == [b"e0", b"e1"]
    assert servicer.read_streams == 1
    await client.close()


async def test_abandoned_long_poll_is_withdrawn_on_the_bookie(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    servicer.entry_gates = {7: asyncio.Event()}
    with pytest.raises(TimeoutError):
        await client.read_entry(3, 7, previous_lac=6, long_poll_timeout_ms=100, timeout=0.2)
    poll = asyncio.ensure_future(client.read_entry(3, 7, previous_lac=6, long_poll_timeout_ms=5000))
    await asyncio.sleep(0.1)
    poll.cancel()
    for _ in range(100):
        if len(servicer.cancelled) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(servicer.cancelled) == 2  # the bookie stops waiting for both
    await client.close()


async def test_broken_read_stream_fails_its_polls_and_the_next_poll_reopens(
    bookie: tuple[MemoryBookie, str],
) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    await client.add(3, 0, b"k" * 20, b"zero")
    servicer.entry_gates = {1: asyncio.Event()}
    parked = asyncio.ensure_future(client.read_entry(3, 1, previous_lac=0, long_poll_timeout_ms=5000))
    servicer.break_read_streams = True
    with pytest.raises(BookieUnavailableError):
        await client.read_entry(3, 0, previous_lac=-1, long_poll_timeout_ms=5000)
    with pytest.raises(BookieUnavailableError):
        await parked
    servicer.break_read_streams = False
    assert (await client.read_entry(3, 0, previous_lac=-1, long_poll_timeout_ms=5000)).body == b"zero"
    assert servicer.read_streams == 2
    await client.close()


async def test_read_timeout_is_translated(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    servicer.read_gate.clear()
    with pytest.raises(TimeoutError):
        await client.read_entry(1, 0, timeout=0.2)
    servicer.read_gate.set()
    await client.close()


async def test_other_unary_calls(bookie: tuple[MemoryBookie, str]) -> None:
    _, address = bookie
    client = BookieClient(address, address)
    await asyncio.gather(*(client.add(2, i, b"k" * 20, b"e%d" % i) for i in range(4)))
    assert await client.read_entries(2, 1, 10, 1 << 20) == [b"e1", b"e2", b"e3"]
    assert await client.read_lac(2) == (None, None)
    assert await client.get_bookie_info() == (100, 40)
    from bkproto.errors import UnauthorizedAccessError

    with pytest.raises(UnauthorizedAccessError):
        await client.write_lac(2, 3, b"k" * 20, b"body")
    await client.close()


async def test_close_fails_pending_adds(bookie: tuple[MemoryBookie, str]) -> None:
    servicer, address = bookie
    client = BookieClient(address, address)
    servicer.hold.clear()
    future = client.add(1, 0, b"k" * 20, b"a")
    await asyncio.sleep(0.05)
    await client.close()
    with pytest.raises(ClientClosedError):
        await future
    with pytest.raises(ClientClosedError):
        await client.add(1, 1, b"k" * 20, b"a")
    servicer.hold.set()


async def test_pool_resolves_ids_and_falls_back_to_host_port(bookie: tuple[MemoryBookie, str]) -> None:
    _, address = bookie
    registry = {"bookie-1": BookieAddress(address)}
    opened: list[BookieClient] = []

    def connect(bookie_id: str, at: BookieAddress) -> BookieClient:
        opened.append(BookieClient(bookie_id, at.grpc, add_address=at.add))
        return opened[-1]

    pool = BookieConnectionPool(connect, registry.get)
    client = pool.get("bookie-1")
    assert client is opened[-1] and opened[-1].address == address
    assert pool.get("bookie-1") is client
    pool.get("10.0.0.1:3181")
    assert opened[-1].address == "10.0.0.1:3181"
    await client.add(1, 0, b"k" * 20, b"a")
    registry["bookie-1"] = BookieAddress("127.0.0.1:2")  # re-registered elsewhere: a new connection
    assert pool.get("bookie-1") is opened[-1] and opened[-1].address == "127.0.0.1:2"
    registry["bookie-1"] = BookieAddress("127.0.0.1:2", "127.0.0.1:3")  # restarted with an add port
    assert pool.get("bookie-1") is opened[-1] and opened[-1].add_address == "127.0.0.1:3"
    closed = opened[-1]
    await closed.close()  # a closed connection is replaced
    assert pool.get("bookie-1") is opened[-1] is not closed
    await pool.close()
    assert all(c.closed for c in opened)  # retired connections too
    with pytest.raises(ClientClosedError):
        pool.get("bookie-1")


async def test_client_pool_opens_the_connections_of_an_injected_connector() -> None:
    """What unit tests and the simulation rely on: no gRPC connection when they supply their own."""
    asked: list[tuple[str, BookieAddress]] = []

    def connect(bookie_id: str, address: BookieAddress) -> InMemoryBookie:
        asked.append((bookie_id, address))
        return InMemoryBookie(bookie_id)

    pool = pool_for(None, ClientConfig(), connect)
    connection = pool.get("b1")
    assert isinstance(connection, InMemoryBookie)
    assert pool.get("b1") is connection
    assert asked == [("b1", BookieAddress("b1"))]
    await pool.close()
    assert connection.closed
