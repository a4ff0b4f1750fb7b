"""LAC long polls against a real bookie: parked until a later entry moves the LAC, else timed out."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Iterator

import grpc
import pytest
from tests.support.bookies import BookieProcess, entry_body

from bkclient.bookie_client import BookieClient
from bkclient.transport import StrideResult
from bkproto.entry_format import LAC_HEADER
from bkproto.errors import BadRequestError
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"p" * 20


@pytest.fixture
def stub(bookie: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    with grpc.insecure_channel(bookie.address) as channel:
        yield bookie_pb2_grpc.BookieStub(channel)


def add(stub: bookie_pb2_grpc.BookieStub, ledger_id: int, entry_id: int, lac: int) -> None:
    request = S.AddRequest(
        ledger_id=ledger_id, entry_id=entry_id, master_key=KEY, body=entry_body(ledger_id, entry_id, lac)
    )
    assert stub.AddEntry(request, timeout=30).status == S.EOK


def poll(previous_lac: int, timeout_ms: int, ledger_id: int = 1) -> bookie_pb2.ReadRequest:
    return S.ReadRequest(
        ledger_id=ledger_id,
        entry_id=-1,
        flags=S.ENTRY_PIGGYBACK,
        previous_lac=previous_lac,
        timeout_ms=timeout_ms,
    )


def test_long_poll_returns_when_a_later_entry_moves_the_lac(stub: bookie_pb2_grpc.BookieStub) -> None:
    add(stub, 1, 0, -1)
    add(stub, 1, 1, 0)  # LAC 0
    parked = stub.ReadEntry.future(poll(previous_lac=0, timeout_ms=120_000), timeout=180)
    time.sleep(0.5)
    assert not parked.done(), "LAC is still 0: the poll must stay parked"
    add(stub, 1, 2, 1)  # piggybacks LAC 1
    response = parked.result(timeout=60)  # far below the poll's own 120 s: woken by the add
    assert (response.status, response.entry_id, response.max_lac) == (S.EOK, 1, 1)
    assert response.body == entry_body(1, 1, 0)


def test_explicit_lac_wakes_a_long_poll(stub: bookie_pb2_grpc.BookieStub) -> None:
    add(stub, 2, 0, -1)
    parked = stub.ReadEntry.future(poll(previous_lac=-1, timeout_ms=120_000, ledger_id=2), timeout=180)
    time.sleep(0.3)
    assert not parked.done()
    body = LAC_HEADER.pack(2, 0) + b"digest"
    assert stub.WriteLac(S.WriteLacRequest(ledger_id=2, lac=0, master_key=KEY, body=body)).status == S.EOK
    response = parked.result(timeout=60)
    assert (response.status, response.entry_id, response.max_lac) == (S.EOK, 0, 0)


def test_long_poll_times_out_with_no_new_entry(stub: bookie_pb2_grpc.BookieStub) -> None:
    add(stub, 3, 0, -1)
    add(stub, 3, 1, 0)
    response = stub.ReadEntry(poll(previous_lac=0, timeout_ms=300, ledger_id=3), timeout=60)
    assert (response.status, response.max_lac) == (S.ENOENTRY, 0)
    assert "still 0" in response.message
    already = stub.ReadEntry(poll(previous_lac=-1, timeout_ms=120_000, ledger_id=3), timeout=60)
    assert (already.status, already.entry_id) == (S.EOK, 0)  # LAC already past: no wait at all


def test_read_stream_multiplexes_polls_cancels_and_refuses_bad_requests(
    stub: bookie_pb2_grpc.BookieStub,
) -> None:
    add(stub, 4, 0, -1)
    add(stub, 4, 1, 0)  # LAC 0
    requests: queue.Queue[bookie_pb2.ReadStreamRequest | None] = queue.Queue()
    answers = stub.ReadStream(iter(requests.get, None), timeout=120)

    def send(request_id: int, read: bookie_pb2.ReadRequest | None = None, cancel: bool = False) -> None:
        requests.put(S.ReadStreamRequest(request_id=request_id, read=read, cancel=cancel))

    send(1, poll(previous_lac=0, timeout_ms=60_000, ledger_id=4))  # parked: LAC is 0
    send(2, poll(previous_lac=0, timeout_ms=60_000, ledger_id=4))  # parked, then withdrawn
    send(2, poll(previous_lac=0, timeout_ms=60_000, ledger_id=4))  # id 2 is still in flight
    duplicate = next(answers)
    assert (duplicate.request_id, duplicate.read.status) == (2, S.EBADREQ)
    assert "already in flight" in duplicate.read.message
    send(3, S.ReadRequest(ledger_id=-5, entry_id=0))  # bad input: answered, the stream lives on
    bad = next(answers)
    assert (bad.request_id, bad.read.status) == (3, S.EBADREQ)
    send(2, cancel=True)
    send(4, S.ReadRequest(ledger_id=4, entry_id=0))  # a plain read overtakes the parked polls
    plain = next(answers)
    assert (plain.request_id, plain.read.status, plain.read.body) == (4, S.EOK, entry_body(4, 0, -1))
    add(stub, 4, 2, 1)  # LAC 1 wakes poll 1; poll 2 was withdrawn and gets no answer
    woken = next(answers)
    assert (woken.request_id, woken.read.status, woken.read.entry_id) == (1, S.EOK, 1)
    requests.put(None)  # the client ends its side: the stream ends with nothing else
    assert list(answers) == []


async def test_long_poll_to_a_bookie_without_the_entry_still_reports_the_new_lac(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub
) -> None:
    # Striped ledgers put entry N on some bookies only; a bookie that learns LAC >= N from a later
    # entry but does not hold N must still hand the reader that LAC.
    add(stub, 5, 0, -1)
    add(stub, 5, 2, 1)  # LAC 1 arrives with entry 2; entry 1 lives elsewhere
    client = BookieClient(bookie.address, bookie.address)
    try:
        result = await client.read_entry(5, -1, previous_lac=0, long_poll_timeout_ms=5000, piggyback=True)
    finally:
        await client.close()
    assert (result.body, result.max_lac) == (b"", 1)


async def test_stride_poll_parks_then_answers_with_every_confirmed_entry_of_its_stride(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub
) -> None:
    # This bookie holds every third entry of ledger 6 (0, 3, 6, ...), as with E=3 Qw=1.
    stored = ((0, -1), (3, 2), (6, 5), (9, 8), (12, 9))  # (entry id, piggybacked LAC)
    for entry_id, lac in stored:
        add(stub, 6, entry_id, lac)
    client = BookieClient(bookie.address, bookie.address)

    async def first_answer(*args: int) -> StrideResult:
        poll = client.standing_stride_poll(6, *args)
        try:
            return await poll.next()
        finally:
            poll.cancel()

    try:
        run = await first_answer(0, 3, 100, 1 << 20, 5000)
        held = [entry_body(6, e, lac) for e, lac in stored[:4]]
        assert (run.bodies, run.max_lac, run.more) == (held, 9, True)
        capped = await first_answer(3, 3, 2, 1 << 20, 5000)  # max_count bounds the answer
        assert (capped.bodies, capped.more) == ([entry_body(6, 3, 2), entry_body(6, 6, 5)], False)
        elsewhere = await first_answer(1, 3, 100, 1 << 20, 5000)  # confirmed, not held here
        assert (elsewhere.bodies, elsewhere.max_lac, elsewhere.more) == ([], 9, False)
        timed_out = await first_answer(100, 3, 100, 1 << 20, 50)
        assert (timed_out.bodies, timed_out.max_lac) == ([], 9)
        parked = asyncio.ensure_future(first_answer(12, 3, 100, 1 << 20, 30_000))
        await asyncio.sleep(0.2)
        assert not parked.done()  # entry 12 exists but is not confirmed yet
        await asyncio.to_thread(add, stub, 6, 15, 12)
        woken = await asyncio.wait_for(parked, 10)
        assert (woken.bodies, woken.max_lac) == ([entry_body(6, 12, 9)], 12)
        with pytest.raises(BadRequestError, match="stride 0 is outside"):
            await first_answer(0, 0, 100, 1 << 20, 5000)
    finally:
        await client.close()
