"""The bookie gRPC service and its handlers over a real loopback gRPC server, with an in-memory
core (the storage-backed core is exercised by the integration tests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, generate_latest
from tests.support.add_requests import MASTER_KEY, add_request, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore, FakeLedger

from bkproto.entry_format import HEADER, LAC_HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.handlers import HandlerLimits
from bookie.handlers.read_entries import ReadEntriesHandler
from bookie.handlers.read_entry import ReadEntryHandler
from bookie.handlers.read_stream import ReadStreamHandler
from bookie.handlers.stride_poll import StridePollHandler
from bookie.service import BookieService
from bookie.stats import RequestStats

S = bookie_pb2


class Harness:
    def __init__(self, core: FakeBookieCore, service: BookieService, registry: CollectorRegistry) -> None:
        self.core = core
        self.service = service
        self.registry = registry
        self.stats: RequestStats
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        self.stub = bookie_pb2_grpc.BookieStub(self.channel)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    registry = CollectorRegistry()
    core = FakeBookieCore()
    stats = RequestStats(registry)
    limits = HandlerLimits(max_entry_bytes=4096, add_stream_window=3, max_long_poll_ms=60_000)
    service = BookieService(core, stats, "127.0.0.1", 0, limits)
    await service.start()
    h = Harness(core, service, registry)
    h.stats = stats
    yield h
    await h.channel.close()
    await service.stop(0)


async def add_batches(
    h: Harness, *batches: list[bookie_pb2.AddRequest]
) -> list[bookie_pb2.AddEntriesResponse]:
    call = h.stub.AddEntries()
    for batch in batches:
        await call.write(bookie_pb2.AddEntriesRequest(adds=batch))
    await call.done_writing()
    return [r async for r in call]


async def test_stream_batch_is_acknowledged_per_add_in_order(harness: Harness) -> None:
    batch = [add_request(1, e) for e in range(5)]
    (response,) = await add_batches(harness, batch)
    assert [(r.status, r.ledger_id, r.entry_id) for r in response.results] == [
        (S.EOK, 1, e) for e in range(5)
    ]
    assert harness.core.ledgers[1].entries[3] == fake_entry(1, 3)
    assert harness.core.add_calls == [5]  # one core call per message


async def test_malformed_adds_get_their_own_status_and_neighbours_succeed(harness: Harness) -> None:
    batch = [
        add_request(7, 0),
        add_request(-1, 1),
        add_request(7, -2),
        add_request(7, 1, key=b""),
        bookie_pb2.AddRequest(ledger_id=7, entry_id=2, master_key=MASTER_KEY, body=b"short"),
        bookie_pb2.AddRequest(
            ledger_id=7, entry_id=3, master_key=MASTER_KEY, body=HEADER.pack(7, 3, -1, 0) + b"x" * 5000
        ),
        bookie_pb2.AddRequest(ledger_id=7, entry_id=4, master_key=MASTER_KEY, body=fake_entry(7, 5)),
        add_request(7, 6),
    ]
    (response,) = await add_batches(harness, batch)
    statuses = [r.status for r in response.results]
    assert statuses == [S.EOK, S.EBADREQ, S.EBADREQ, S.EUA, S.EBADREQ, S.EBADREQ, S.EBADREQ, S.EOK]
    messages = [r.message for r in response.results]
    assert "negative" in messages[1]
    assert "master key" in messages[3]
    assert "shorter than the 32-byte entry header" in messages[4]
    assert "exceeds the 4096-byte limit" in messages[5]
    assert "entry header says ledger 7 entry 5" in messages[6]
    assert sorted(harness.core.ledgers[7].entries) == [0, 6]


async def test_wrong_master_key_is_unauthorized(harness: Harness) -> None:
    await add_batches(harness, [add_request(2, 0)])
    (response,) = await add_batches(harness, [add_request(2, 1, key=b"x" * 20)])
    assert response.results[0].status == S.EUA
    assert 1 not in harness.core.ledgers[2].entries


async def test_stream_pipelines_batches_and_answers_in_order(harness: Harness) -> None:
    harness.core.add_gate = asyncio.Event()
    call = harness.stub.AddEntries()
    for e in range(3):
        await call.write(bookie_pb2.AddEntriesRequest(adds=[add_request(3, e)]))
    await harness.core.wait_for_add_calls(3)  # all three batches reach the core before any is durable
    harness.core.add_gate.set()
    await call.done_writing()
    responses = [r async for r in call]
    assert [r.results[0].entry_id for r in responses] == [0, 1, 2]


async def test_stream_window_bounds_batches_in_progress(harness: Harness) -> None:
    harness.core.add_gate = asyncio.Event()
    call = harness.stub.AddEntries()
    for e in range(6):
        await call.write(bookie_pb2.AddEntriesRequest(adds=[add_request(4, e)]))
    await harness.core.wait_for_add_calls(3)
    await asyncio.sleep(0.2)  # give the reader every chance to over-read
    assert len(harness.core.add_calls) == 3  # the window (3), not the 6 sent
    harness.core.add_gate.set()
    await call.done_writing()
    responses = [r async for r in call]
    assert [r.results[0].entry_id for r in responses] == list(range(6))


async def test_core_failure_fails_that_batch_only_and_the_stream_survives(harness: Harness) -> None:
    call = harness.stub.AddEntries()
    harness.core.fail_adds_with = OSError("disk on fire")
    await call.write(bookie_pb2.AddEntriesRequest(adds=[add_request(5, 0), add_request(5, 1)]))
    first = await call.read()
    assert [r.status for r in first.results] == [S.EIO, S.EIO]
    assert "disk on fire" in first.results[0].message
    harness.core.fail_adds_with = None
    await call.write(bookie_pb2.AddEntriesRequest(adds=[add_request(5, 2)]))
    second = await call.read()
    assert second.results[0].status == S.EOK
    await call.done_writing()


async def test_unary_add_entry(harness: Harness) -> None:
    response = await harness.stub.AddEntry(add_request(6, 0))
    assert (response.status, response.ledger_id, response.entry_id) == (S.EOK, 6, 0)
    bad = await harness.stub.AddEntry(bookie_pb2.AddRequest(ledger_id=6, entry_id=1, master_key=MASTER_KEY))
    assert bad.status == S.EBADREQ


async def test_reads(harness: Harness) -> None:
    await add_batches(harness, [add_request(8, 0), add_request(8, 1, lac=0), add_request(8, 2, lac=1)])
    r = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=8, entry_id=1))
    assert (r.status, r.body, r.max_lac) == (S.EOK, fake_entry(8, 1, 0), 1)
    last = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=8, entry_id=-1))
    assert (last.status, last.entry_id, last.body) == (S.EOK, 2, fake_entry(8, 2, 1))
    missing = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=8, entry_id=9))
    assert missing.status == S.ENOENTRY and "entry 9" in missing.message
    unknown = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=99, entry_id=0))
    assert unknown.status == S.ENOLEDGER
    invalid = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=8, entry_id=-5))
    assert invalid.status == S.EBADREQ
    batch = await harness.stub.ReadEntries(S.ReadEntriesRequest(ledger_id=8, first_entry_id=1, max_count=10))
    assert (batch.status, list(batch.bodies)) == (S.EOK, [fake_entry(8, 1, 0), fake_entry(8, 2, 1)])
    bad_count = await harness.stub.ReadEntries(
        S.ReadEntriesRequest(ledger_id=8, first_entry_id=0, max_count=0)
    )
    assert bad_count.status == S.EBADREQ
    strided = await harness.stub.ReadEntries(
        S.ReadEntriesRequest(ledger_id=8, first_entry_id=0, max_count=10, stride=2)
    )
    assert (strided.status, list(strided.bodies)) == (S.EOK, [fake_entry(8, 0), fake_entry(8, 2, 1)])
    for stride in (-1, 1025):
        bad_stride = await harness.stub.ReadEntries(
            S.ReadEntriesRequest(ledger_id=8, first_entry_id=0, max_count=10, stride=stride)
        )
        assert bad_stride.status == S.EBADREQ and "stride" in bad_stride.message


async def test_fencing_read(harness: Harness) -> None:
    await add_batches(harness, [add_request(9, 0)])
    no_key = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=9, entry_id=-1, flags=S.FENCE_LEDGER))
    assert no_key.status == S.EUA
    assert not harness.core.ledgers[9].fenced
    wrong = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=9, entry_id=-1, flags=S.FENCE_LEDGER, master_key=b"w" * 20)
    )
    assert wrong.status == S.EUA
    fenced = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=9, entry_id=-1, flags=S.FENCE_LEDGER, master_key=MASTER_KEY)
    )
    assert (fenced.status, fenced.entry_id) == (S.EOK, 0)
    (after,) = await add_batches(harness, [add_request(9, 1), add_request(9, 1, flags=S.RECOVERY_ADD)])
    assert [r.status for r in after.results] == [S.EFENCED, S.EOK]
    # fencing a ledger the bookie never saw creates it fenced: a lagging writer is refused
    fresh = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=10, entry_id=-1, flags=S.FENCE_LEDGER, master_key=MASTER_KEY)
    )
    assert fresh.status == S.ENOENTRY
    (late,) = await add_batches(harness, [add_request(10, 0)])
    assert late.results[0].status == S.EFENCED
    assert harness.stats.read_entry_fence_request.count(True) == 1


async def test_long_poll_wakes_on_a_later_entry(harness: Harness) -> None:
    await add_batches(harness, [add_request(11, 0)])
    poll = asyncio.ensure_future(
        harness.stub.ReadEntry(
            S.ReadRequest(
                ledger_id=11, entry_id=-1, flags=S.ENTRY_PIGGYBACK, previous_lac=-1, timeout_ms=30_000
            )
        )
    )
    await asyncio.sleep(0.2)
    assert not poll.done()  # parked: LAC is still -1
    await add_batches(harness, [add_request(11, 1, lac=0)])
    response = await poll
    found = (response.status, response.entry_id, response.body, response.max_lac)
    assert found == (S.EOK, 0, fake_entry(11, 0), 0)


async def test_long_poll_times_out_with_enoentry_and_current_lac(harness: Harness) -> None:
    await add_batches(harness, [add_request(12, 0), add_request(12, 1, lac=0)])
    response = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=12, entry_id=-1, flags=S.ENTRY_PIGGYBACK, previous_lac=0, timeout_ms=50)
    )
    assert (response.status, response.max_lac) == (S.ENOENTRY, 0)
    immediate = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=12, entry_id=-1, flags=S.ENTRY_PIGGYBACK, previous_lac=-1, timeout_ms=30_000)
    )
    assert (immediate.status, immediate.entry_id, immediate.max_lac) == (S.EOK, 0, 0)
    bad = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=12, entry_id=3, flags=S.ENTRY_PIGGYBACK, previous_lac=0, timeout_ms=10)
    )
    assert bad.status == S.EBADREQ
    too_long = await harness.stub.ReadEntry(
        S.ReadRequest(ledger_id=12, entry_id=-1, previous_lac=0, timeout_ms=-1)
    )
    assert too_long.status == S.EBADREQ
    assert harness.stats.read_entry_long_poll_request.count(True) == 1
    assert harness.stats.read_entry_long_poll_request.count(False) == 3


async def test_lac_write_and_read(harness: Harness) -> None:
    await add_batches(harness, [add_request(13, 0), add_request(13, 1, lac=0)])
    lac_body = LAC_HEADER.pack(13, 1) + b"digest"
    ok = await harness.stub.WriteLac(
        S.WriteLacRequest(ledger_id=13, lac=1, master_key=MASTER_KEY, body=lac_body)
    )
    assert ok.status == S.EOK
    mismatch = await harness.stub.WriteLac(
        S.WriteLacRequest(ledger_id=13, lac=2, master_key=MASTER_KEY, body=lac_body)
    )
    assert mismatch.status == S.EBADREQ and "LAC body says ledger 13 LAC 1" in mismatch.message
    no_key = await harness.stub.WriteLac(S.WriteLacRequest(ledger_id=13, lac=1, body=lac_body))
    assert no_key.status == S.EUA
    short = await harness.stub.WriteLac(
        S.WriteLacRequest(ledger_id=13, lac=1, master_key=MASTER_KEY, body=b"x")
    )
    assert short.status == S.EBADREQ
    read = await harness.stub.ReadLac(S.ReadLacRequest(ledger_id=13))
    assert (read.status, read.lac_body, read.last_entry_body) == (S.EOK, lac_body, fake_entry(13, 1, 0))
    unknown = await harness.stub.ReadLac(S.ReadLacRequest(ledger_id=14))
    assert unknown.status == S.ENOLEDGER


async def test_force_info_and_list(harness: Harness) -> None:
    await add_batches(harness, [add_request(15, e) for e in (0, 1, 2, 5, 6)])
    assert (await harness.stub.ForceLedger(S.ForceLedgerRequest(ledger_id=15))).status == S.EOK
    assert (await harness.stub.ForceLedger(S.ForceLedgerRequest(ledger_id=-3))).status == S.EBADREQ
    info = await harness.stub.GetBookieInfo(
        S.GetBookieInfoRequest(requested=S.TOTAL_DISK_CAPACITY | S.FREE_DISK_SPACE)
    )
    assert (info.status, info.total_disk_capacity, info.free_disk_space) == (S.EOK, 1000, 400)
    runs = await harness.stub.GetListOfEntriesOfLedger(S.GetListOfEntriesOfLedgerRequest(ledger_id=15))
    assert [(r.first, r.last) for r in runs.ranges] == [(0, 2), (5, 6)]


async def test_read_only_bookie_refuses_writes_but_takes_recovery_adds(harness: Harness) -> None:
    harness.core.read_only = True
    (response,) = await add_batches(harness, [add_request(16, 0), add_request(16, 1, flags=S.RECOVERY_ADD)])
    assert [r.status for r in response.results] == [S.EREADONLY, S.EOK]
    lac = await harness.stub.WriteLac(
        S.WriteLacRequest(ledger_id=16, lac=0, master_key=MASTER_KEY, body=LAC_HEADER.pack(16, 0))
    )
    assert lac.status == S.EREADONLY


async def test_unexpected_core_error_is_eio_and_logged_not_raised(harness: Harness) -> None:
    async def broken(ledger_id: int, entry_id: int) -> bytes:
        raise RuntimeError("index corrupted")

    harness.core.read_entry = broken  # type: ignore[method-assign]
    response = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=1, entry_id=0))
    assert response.status == S.EIO and "index corrupted" in response.message


async def test_health_and_metrics(harness: Harness) -> None:
    health = health_pb2_grpc.HealthStub(harness.channel)
    for service in ("", "bkproto.v1.Bookie"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await add_batches(harness, [add_request(17, 0), add_request(17, 1, key=b"")])
    text = generate_latest(harness.registry).decode()
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 1.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="false"} 1.0' in text
    # BookKeeper's op stat shape: a summary with quantiles, NaN for an outcome not seen lately
    assert "# TYPE bookkeeper_server_ADD_ENTRY_REQUEST summary" in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST{quantile="0.99",success="true"}' in text
    assert 'bookkeeper_server_READ_ENTRY_REQUEST{quantile="0.5",success="true"} NaN' in text


async def test_stop_answers_started_batches_then_ends_the_stream(harness: Harness) -> None:
    harness.core.add_gate = asyncio.Event()
    call = harness.stub.AddEntries()
    await call.write(bookie_pb2.AddEntriesRequest(adds=[add_request(18, 0)]))
    await harness.core.wait_for_add_calls(1)
    stopping = asyncio.ensure_future(harness.service.stop(10))
    await asyncio.sleep(0.1)
    harness.core.add_gate.set()
    first = await call.read()
    assert first.results[0].status == S.EOK
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    await stopping


async def test_add_bytes_in_progress_are_bounded_across_streams() -> None:
    core = FakeBookieCore()
    core.add_gate = asyncio.Event()
    limits = HandlerLimits(add_in_progress_max_bytes=3000)
    service = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, limits)
    await service.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = bookie_pb2_grpc.BookieStub(channel)
            payload = b"p" * 1800  # each message ~1.9 KB: two of them exceed the 3000-byte budget
            calls = [stub.AddEntries(), stub.AddEntries()]
            for n, call in enumerate(calls):
                for e in range(2):
                    request = add_request(20 + n, e)
                    request.body = fake_entry(20 + n, e, payload=payload)
                    await call.write(bookie_pb2.AddEntriesRequest(adds=[request]))
            await core.wait_for_add_calls(1)
            await asyncio.sleep(0.2)  # give the readers every chance to over-admit
            assert len(core.add_calls) == 1  # one message in progress; three wait for budget
            assert service.servicer.add_entries.budget.used > 0
            core.add_gate.set()
            for n, call in enumerate(calls):
                await call.done_writing()
                responses = [r async for r in call]
                assert [r.results[0].status for r in responses] == [S.EOK, S.EOK], n
            assert service.servicer.add_entries.budget.used == 0
    finally:
        await service.stop(0)


async def test_read_stream_answers_not_yet_written_hold_their_slots() -> None:
    # A client that stops reading answers must stop the bookie reading its requests (then HTTP/2
    # flow control pushes back), not grow a queue of answers.
    pulled: list[int] = []

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        for i in range(10):
            pulled.append(i)
            yield S.ReadStreamRequest(request_id=i, read=S.ReadRequest(ledger_id=-1))  # answered at once

    core, stats, limits = FakeBookieCore(), RequestStats(CollectorRegistry()), HandlerLimits()
    handler = ReadStreamHandler(
        ReadEntryHandler(core, stats, limits),
        StridePollHandler(core, stats, limits),
        ReadEntriesHandler(core, stats, limits),
        max_in_flight=2,
    )
    answers = handler(requests(), None)  # type: ignore[arg-type]
    first = await answers.__anext__()
    await asyncio.sleep(0.05)
    assert pulled == [0, 1, 2]  # two answers unwritten: the third request waits for a slot
    rest = [answer async for answer in answers]
    assert sorted(a.request_id for a in [first, *rest]) == list(range(10))
    assert {a.read.status for a in [first, *rest]} == {S.EBADREQ}


def _read_stream_handler(core: FakeBookieCore, limits: HandlerLimits) -> ReadStreamHandler:
    stats = RequestStats(CollectorRegistry())
    return ReadStreamHandler(
        ReadEntryHandler(core, stats, limits),
        StridePollHandler(core, stats, limits),
        ReadEntriesHandler(core, stats, limits),
        max_in_flight=limits.read_stream_max_in_flight,
    )


async def test_read_stream_batched_reads_wait_for_their_share_of_the_answer_budget() -> None:
    # A read stream serves up to read_stream_max_in_flight requests at once; megabyte ReadEntries
    # answers that the client leaves unread must not pile up to that many: each reserves its byte
    # bound first (then holds what it read), and the IP's share caps what is held.
    core = FakeBookieCore()
    entries = {e: fake_entry(4, e, payload=b"p" * 450) for e in range(20)}  # two: about 1 KB
    core.ledgers[4] = FakeLedger(MASTER_KEY, entries=entries)
    limits = HandlerLimits(
        read_stream_max_in_flight=16, read_answers_max_bytes=4096, read_answers_max_bytes_per_peer=2048
    )
    handler = _read_stream_handler(core, limits)

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        for i in range(10):
            batch = S.ReadEntriesRequest(ledger_id=4, first_entry_id=2 * i, max_count=2, max_bytes=1024)
            yield S.ReadStreamRequest(request_id=i, read_entries=batch)

    answers = handler(requests(), None)  # type: ignore[arg-type]
    first = await answers.__anext__()
    await asyncio.sleep(0.05)
    # about 1 KB each, 2048 bytes for the IP: the first answer (being written) and one more
    assert 1024 < handler.answer_bytes.used <= 2048
    rest = [answer async for answer in answers]
    parsed = [S.ReadStreamResponse.FromString(a.SerializeToString()) for a in [first, *rest]]
    by_id = {a.request_id: a.read_entries for a in parsed}
    assert sorted(by_id) == list(range(10))
    assert all(list(r.bodies) == [entries[2 * i], entries[2 * i + 1]] for i, r in by_id.items())
    assert handler.answer_bytes.used == 0


async def test_read_stream_answers_dropped_unwritten_give_their_bytes_back() -> None:
    core = FakeBookieCore()
    core.ledgers[4] = FakeLedger(MASTER_KEY, entries={e: fake_entry(4, e) for e in range(4)})
    handler = _read_stream_handler(core, HandlerLimits(read_stream_max_in_flight=8))
    release = asyncio.Event()

    async def requests() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        for i in range(4):
            batch = S.ReadEntriesRequest(ledger_id=4, first_entry_id=i, max_count=1, max_bytes=1000)
            yield S.ReadStreamRequest(request_id=i, read_entries=batch)
        await release.wait()

    answers = handler(requests(), None)  # type: ignore[arg-type]
    await answers.__anext__()
    await asyncio.sleep(0.05)
    # the one being written and three queued, each holding what it read, not its 1000-byte bound
    assert 0 < handler.answer_bytes.used < 4000
    await answers.aclose()  # the client went away
    assert handler.answer_bytes.used == 0
    # a request the handler refuses is answered, and holds nothing
    refused = _read_stream_handler(core, HandlerLimits())

    async def bad() -> AsyncIterator[bookie_pb2.ReadStreamRequest]:
        yield S.ReadStreamRequest(request_id=1, read_entries=S.ReadEntriesRequest(ledger_id=4, max_count=0))

    (answer,) = [S.ReadStreamResponse.FromString(a.SerializeToString()) async for a in refused(bad(), None)]  # type: ignore[arg-type]
    assert (answer.read_entries.status, "max_count 0" in answer.read_entries.message) == (S.EBADREQ, True)
    assert refused.answer_bytes.used == 0


async def test_unary_reads_share_the_read_streams_answer_budget(harness: Harness) -> None:
    # One budget for every read answer, over real gRPC: a call's bytes come back when it ends.
    harness.core.ledgers[4] = FakeLedger(MASTER_KEY, entries={e: fake_entry(4, e) for e in range(4)})
    servicer = harness.service.servicer
    budget = servicer.read_entries.answer_bytes
    assert servicer.read_stream.answer_bytes is budget and servicer.read_entry.answer_bytes is budget
    reply = await harness.stub.ReadEntries(S.ReadEntriesRequest(ledger_id=4, first_entry_id=0, max_count=4))
    assert list(reply.bodies) == [fake_entry(4, e) for e in range(4)]
    read = await harness.stub.ReadEntry(S.ReadRequest(ledger_id=4, entry_id=1))
    assert (read.status, read.body) == (S.EOK, fake_entry(4, 1))
    for _ in range(100):  # the call's end reaches the server just after the client has the answer
        if budget.used == 0:
            break
        await asyncio.sleep(0.01)
    assert budget.used == 0
