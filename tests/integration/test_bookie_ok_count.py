"""The add stream's count of successes (``count_ok`` / ``ok_count``) against a real bookie, over
the add port and over gRPC: a message whose adds all succeed in its leading slices is answered
by their count, every add after the first refusal by its own result; a message without the flag
is answered one result per add, as before the flag; and the client, whose messages carry it,
completes the counted adds and gets each refused add's own error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest
from tests.support.add_port_peer import exchange_over_add_port
from tests.support.bookies import BookieFactory, BookieProcess, entry_body, packed_adds
from tests.support.scripted_add_call import CompletionLog

from bkclient.add_stream import AddRequestEncoder
from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"c" * 20
SLICE = 4  # addsPerLoopTurn: a message of more adds is checked and answered slice by slice
FENCED = 2  # a ledger the tests fence before adding to it


@pytest.fixture
def bookie(bookie_factory: BookieFactory) -> BookieProcess:
    bookie = bookie_factory(conf={"addsPerLoopTurn": str(SLICE)})
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        first = S.AddRequest(ledger_id=FENCED, entry_id=0, master_key=KEY, body=entry_body(FENCED, 0))
        assert stub.AddEntry(first, timeout=30).status == S.EOK
        fence = S.ReadRequest(ledger_id=FENCED, entry_id=-1, flags=S.FENCE_LEDGER, master_key=KEY)
        assert stub.ReadEntry(fence, timeout=30).status == S.EOK
    return bookie


@pytest.fixture
def stub(bookie: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    with grpc.insecure_channel(bookie.address) as channel:
        yield bookie_pb2_grpc.BookieStub(channel)


def exchange(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub, transport: str, request: S.AddEntriesRequest
) -> S.AddEntriesResponse:
    """``request``'s answer over ``transport`` (a stream of that one message)."""
    if transport == "grpc":
        (response,) = list(stub.AddEntries(iter([request]), timeout=30))
        return response
    assert bookie.add_port is not None
    return exchange_over_add_port(bookie.add_port, request)


def answers(response: S.AddEntriesResponse) -> list[tuple[int, int, int]]:
    return [(r.ledger_id, r.entry_id, r.status) for r in response.results]


@pytest.mark.parametrize("transport", ["add_port", "grpc"])
def test_the_leading_all_ok_slices_are_counted_and_each_add_after_a_refusal_has_its_result(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub, transport: str
) -> None:
    def message(ledger_id: int, count_ok: bool) -> S.AddEntriesRequest:
        """Slices: [ledger's 0-3] [fenced 1-2, next ledger's 0-1] [third ledger's 0-3]."""
        groups = [packed_adds(ledger_id, range(4), KEY), packed_adds(FENCED, [1, 2], KEY),
                  packed_adds(ledger_id + 1, [0, 1], KEY), packed_adds(ledger_id + 2, range(4), KEY)]
        return S.AddEntriesRequest(packed=groups, count_ok=count_ok)

    after_refusal = [(FENCED, 1, S.EFENCED), (FENCED, 2, S.EFENCED), (11, 0, S.EOK), (11, 1, S.EOK)]
    after_refusal += [(12, e, S.EOK) for e in range(4)]
    counted = exchange(bookie, stub, transport, message(10, count_ok=True))
    assert counted.ok_count == 4
    assert answers(counted) == after_refusal

    plain = exchange(bookie, stub, transport, message(20, count_ok=False))  # a client without the flag
    assert plain.ok_count == 0
    assert answers(plain) == (
        [(20, e, S.EOK) for e in range(4)] + [(FENCED, 1, S.EFENCED), (FENCED, 2, S.EFENCED)]
        + [(21, 0, S.EOK), (21, 1, S.EOK)] + [(22, e, S.EOK) for e in range(4)]
    )
    all_ok = S.AddEntriesRequest(packed=[packed_adds(30, range(6), KEY)], count_ok=True)  # two slices
    answer = exchange(bookie, stub, transport, all_ok)
    assert (answer.ok_count, len(answer.results)) == (6, 0)


@pytest.mark.parametrize("use_add_port", [True, False], ids=["add port", "gRPC"])
async def test_the_client_completes_the_counted_adds_and_each_refused_add_gets_its_error(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub, use_add_port: bool
) -> None:
    """Adds of three ledgers queued in one step leave in one message, answered in the order of
    its groups: the first slice (ledger 40's four adds) is counted; the fenced ledger's adds
    fail each, and ledger 41's, in the same slice, succeed each by their own result."""
    options = BookieClientOptions(use_add_port=use_add_port)
    client = BookieClient(bookie.address, bookie.address, options, f"127.0.0.1:{bookie.add_port}")
    logs = {ledger_id: CompletionLog() for ledger_id in (40, FENCED, 41)}
    queued = {40: range(4), FENCED: [1, 2], 41: [0, 1]}
    for ledger_id, entry_ids in queued.items():
        bodies = [entry_body(ledger_id, e, e - 1) for e in entry_ids]
        client.add_bodies(AddRequestEncoder(ledger_id, KEY), bodies, logs[ledger_id], list(entry_ids))
    try:
        await asyncio.gather(*(logs[ledger_id].wait(len(ids)) for ledger_id, ids in queued.items()))
    finally:
        await client.close()
    assert logs[40].calls == [("all", [0, 1, 2, 3])]
    assert logs[FENCED].calls == [(1, "LedgerFencedError"), (2, "LedgerFencedError")]
    assert logs[41].calls == [(0, None), (1, None)]
    for ledger_id, entry_id in [(40, 0), (40, 3), (41, 1)]:
        reply = stub.ReadEntry(S.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=30)
        assert reply.body == entry_body(ledger_id, entry_id, entry_id - 1)
