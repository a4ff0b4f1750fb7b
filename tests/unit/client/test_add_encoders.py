"""The add encoders' bytes: what protobuf itself would serialize, and the body the digest
manager makes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bkclient.add_stream import LedgerAddRequestEncoder
from bkclient.bookie_client import AddRequestEncoder
from bkclient.digest import CRC32, CRC32C, DUMMY, HMAC, DigestManager
from bkclient.transport import decode_add
from bkproto.add_port import frame
from bkproto.v1 import bookie_pb2
from bkproto.wire import COUNT_OK


@given(
    ledger_id=st.integers(min_value=0, max_value=2**63 - 1),
    entry_id=st.integers(min_value=-1, max_value=2**63 - 1),
    key=st.binary(max_size=20),
    body=st.binary(max_size=300),
    recovery=st.booleans(),
)
def test_encoder_bytes_equal_protobuf_serialization(
    ledger_id: int, entry_id: int, key: bytes, body: bytes, recovery: bool
) -> None:
    add = bookie_pb2.AddRequest(
        ledger_id=ledger_id,
        entry_id=entry_id,
        master_key=key,
        body=body,
        flags=bookie_pb2.RECOVERY_ADD if recovery else 0,
    )
    expected = bookie_pb2.AddEntriesRequest(adds=[add]).SerializeToString()
    encoded = AddRequestEncoder(ledger_id, key).encode(entry_id, body, recovery)
    assert encoded == expected
    flagged = bookie_pb2.AddEntriesRequest(adds=[add], count_ok=True).SerializeToString()
    assert AddRequestEncoder(ledger_id, key).encode(entry_id, body, recovery, trailer=COUNT_OK) == flagged
    two = bookie_pb2.AddEntriesRequest.FromString(encoded + encoded)
    assert list(two.adds) == [add, add]
    assert decode_add(encoded) == (ledger_id, entry_id, key, body, recovery)  # in-memory bookies' view


@given(
    ledger_id=st.integers(min_value=0, max_value=2**63 - 1),
    key=st.binary(max_size=24),
    entries=st.lists(
        st.tuples(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.binary(max_size=300)),
        min_size=1,
        max_size=8,
    ),
)
def test_packed_group_bytes_equal_protobuf_serialization(
    ledger_id: int, key: bytes, entries: list[tuple[int, bytes]]
) -> None:
    """A packed group is the ``packed`` element protobuf would write, and parses back to the
    entries' ids and bodies; several groups and ``adds`` elements concatenate into one message."""
    entry_ids = [entry_id for entry_id, _ in entries]
    bodies = [body for _, body in entries]
    group = bookie_pb2.PackedAdds(
        ledger_id=ledger_id,
        master_key=key,
        entry_ids=entry_ids,
        body_sizes=list(map(len, bodies)),
        bodies=b"".join(bodies),
    )
    encoder = AddRequestEncoder(ledger_id, key)
    packed = encoder.pack(entry_ids, bodies)
    assert packed == bookie_pb2.AddEntriesRequest(packed=[group]).SerializeToString()
    flagged = bookie_pb2.AddEntriesRequest(packed=[group], count_ok=True).SerializeToString()
    assert encoder.pack(entry_ids, bodies, COUNT_OK) == flagged
    assert encoder.pack(entry_ids, bodies, COUNT_OK, framed=True) == frame(flagged)  # the add port's
    single = encoder.encode(5, b"lone")
    message = bookie_pb2.AddEntriesRequest.FromString(packed + single + packed)
    assert list(message.packed) == [group, group]
    assert [(a.ledger_id, a.entry_id, a.body) for a in message.adds] == [(ledger_id, 5, b"lone")]


@given(
    ledger_id=st.integers(min_value=0, max_value=2**63 - 1),
    digest_type=st.sampled_from([CRC32, CRC32C, HMAC, DUMMY]),
    entries=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2**40),
            st.integers(min_value=-1, max_value=2**40),
            st.binary(max_size=300),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_ledger_encoder_body_equals_the_digest_manager_body(
    ledger_id: int, digest_type: int, entries: list[tuple[int, int, bytes]]
) -> None:
    """The write handle's encoder (header and digest in one call, the payload copied once) gives
    the body the digest manager gives, for entries of changing sizes one after the other."""
    digest = DigestManager(ledger_id, b"pw", digest_type)
    encoder = LedgerAddRequestEncoder(ledger_id, digest)
    length = 0
    for entry_id, lac, payload in entries:
        length += len(payload)
        expected = digest.encode_entry(entry_id, lac, length, payload)
        assert encoder.encode_body(entry_id, lac, length, payload) == expected
