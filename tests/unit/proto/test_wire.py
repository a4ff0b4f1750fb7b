"""Hand-built wire bytes must be what protobuf itself would send, byte for byte: a reader
parses them with ``ReadEntriesResponse.FromString``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage, encode_read_entries_ok, stream_read_entries, varint

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
BODIES = st.lists(st.binary(max_size=300) | st.sampled_from([b"x" * 20_000, b"y" * 3_000_000]), max_size=20)


@given(st.one_of(INT64, st.integers(0, 1 << 22), st.integers(0, 1 << 29)))  # and the unrolled sizes
def test_varint_is_protobufs(value: int) -> None:
    # a varint field's bytes are its tag (one byte for field 2) then the varint
    expected = bookie_pb2.ReadEntriesResponse(ledger_id=value).SerializeToString()
    assert (b"\x10" + varint(value) if value else b"") == expected


@given(INT64, INT64, BODIES, INT64)
def test_read_entries_answer_is_protobufs(
    ledger_id: int, first: int, bodies: list[bytes], max_lac: int
) -> None:
    message = bookie_pb2.ReadEntriesResponse(
        status=bookie_pb2.EOK, ledger_id=ledger_id, first_entry_id=first, bodies=bodies, max_lac=max_lac
    )
    encoded = encode_read_entries_ok(ledger_id, first, bodies, max_lac)
    assert encoded == message.SerializeToString()
    assert bookie_pb2.ReadEntriesResponse.FromString(encoded) == message


def test_an_encoded_message_serializes_to_its_bytes() -> None:
    answer = EncodedMessage(encode_read_entries_ok(7, 0, [b"a", b""], -1))
    assert answer.status == bookie_pb2.EOK
    assert list(bookie_pb2.ReadEntriesResponse.FromString(answer.SerializeToString()).bodies) == [b"a", b""]



@given(st.integers(0, (1 << 64) - 1), INT64, BODIES)
def test_a_read_stream_answer_around_a_batch_is_protobufs(
    request_id: int, first: int, bodies: list[bytes]
) -> None:
    batch = bookie_pb2.ReadEntriesResponse(ledger_id=3, first_entry_id=first, bodies=bodies)
    answer = stream_read_entries(request_id, EncodedMessage(encode_read_entries_ok(3, first, bodies, 0)))
    expected = bookie_pb2.ReadStreamResponse(request_id=request_id, read_entries=batch).SerializeToString()
    # a carrier may write the head and the data apart, or the two as one
    assert answer.head + answer.data == answer.SerializeToString() == expected
