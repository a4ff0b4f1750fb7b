"""Packed adds (``AddEntriesRequest.packed``) against a real bookie: stored and answered in the
documented order over the add port and over gRPC, a malformed group refused without failing its
neighbours, and a group over ``maxAddsPerMessage`` refused whole, the bookie serving on."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from tests.support.add_port_peer import exchange_over_add_port
from tests.support.bookies import BookieFactory, BookieProcess, entry_body, is_serving, packed_adds
from tests.support.hostile import limit_rejections

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"p" * 20
MAX_ADDS = 1000


@pytest.fixture
def bookie(bookie_factory: BookieFactory) -> BookieProcess:
    return bookie_factory(conf={"maxAddsPerMessage": str(MAX_ADDS)})


@pytest.fixture
def stub(bookie: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    with grpc.insecure_channel(bookie.address) as channel:
        yield bookie_pb2_grpc.BookieStub(channel)


def over_the_add_port(
    bookie: BookieProcess, request: bookie_pb2.AddEntriesRequest
) -> bookie_pb2.AddEntriesResponse:
    assert bookie.add_port is not None
    return exchange_over_add_port(bookie.add_port, request)


def answers(response: bookie_pb2.AddEntriesResponse) -> list[tuple[int, int, int]]:
    return [(r.ledger_id, r.entry_id, r.status) for r in response.results]


def stored(stub: bookie_pb2_grpc.BookieStub, ledger_id: int, entry_id: int) -> bytes | None:
    reply = stub.ReadEntry(S.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=30)
    return reply.body if reply.status == S.EOK else None


def test_packed_adds_are_stored_and_answered_in_order_over_the_add_port_and_grpc(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub
) -> None:
    request = S.AddEntriesRequest()
    request.packed.append(packed_adds(1, range(0, 40), KEY))
    malformed = packed_adds(2, [0, 1, 2], KEY)
    malformed.bodies = malformed.bodies[:-1]  # a byte short of its sizes
    request.packed.append(malformed)
    request.adds.add(ledger_id=3, entry_id=0, master_key=KEY, body=entry_body(3, 0))
    request.packed.append(packed_adds(4, [0, 1], b""))  # no master key: EUA each
    response = over_the_add_port(bookie, request)
    assert answers(response) == (
        [(3, 0, S.EOK)] + [(1, e, S.EOK) for e in range(40)] + [(2, e, S.EBADREQ) for e in range(3)]
        + [(4, 0, S.EUA), (4, 1, S.EUA)]
    )
    assert "body sizes add up to" in response.results[41].message

    # gRPC: the same message layout through the AddEntries stream
    second = S.AddEntriesRequest(packed=[packed_adds(1, range(40, 80), KEY), packed_adds(5, [0], KEY)])
    (grpc_response,) = list(stub.AddEntries(iter([second]), timeout=30))
    assert answers(grpc_response) == [(1, e, S.EOK) for e in range(40, 80)] + [(5, 0, S.EOK)]

    assert all(stored(stub, 1, e) == entry_body(1, e, e - 1) for e in range(80))
    assert stored(stub, 3, 0) == entry_body(3, 0)
    assert stored(stub, 2, 0) is None
    assert stored(stub, 4, 0) is None


@pytest.mark.parametrize("transport", ["add_port", "grpc"])
def test_a_packed_group_over_max_adds_per_message_is_refused_whole(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub, transport: str
) -> None:
    """Zero-size adds cost the sender 12 bytes each: counted from the group's field lengths."""
    zero_size = S.PackedAdds(
        ledger_id=1, master_key=KEY, entry_ids=range(20 * MAX_ADDS), body_sizes=[0] * (20 * MAX_ADDS)
    )
    over = S.AddEntriesRequest(packed=[zero_size])
    if transport == "add_port":
        with pytest.raises(ConnectionError):
            over_the_add_port(bookie, over)
    else:
        with pytest.raises(grpc.RpcError):
            list(stub.AddEntries(iter([over]), timeout=30))
    assert limit_rejections(bookie.http_port or 0, transport, "adds_per_message") == 1
    at_the_limit = S.AddEntriesRequest(packed=[packed_adds(6, range(MAX_ADDS), KEY)])
    assert answers(over_the_add_port(bookie, at_the_limit)) == [(6, e, S.EOK) for e in range(MAX_ADDS)]
    assert is_serving(bookie.address)
