"""Metadata bytes are BookKeeper's format v3, built here by hand from DataFormats.proto field numbers
(never with our encoder), so a mistake in the encoder cannot hide in the expectation."""

from __future__ import annotations

import pytest

from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkmeta.serde import CorruptLedgerMetadataError, deserialize, serialize

HEADER = b"BookieMetadataFormatVersion\t3\n"


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 negatives are ten-byte two's complement varints
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | 0) + varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def md(**overrides: object) -> LedgerMetadata:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum_size": 2,
        "ack_quorum_size": 2,
        "state": LedgerState.OPEN,
        "last_entry_id": -1,
        "length": 0,
        "digest_type": DigestType.CRC32C,
        "password": b"pw",
        "ctime": 1_700_000_000_000,
        "custom_metadata": {"app": b"x"},
        "segments": (Segment(0, ("a:1", "b:2", "c:3")),),
    }
    fields.update(overrides)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


def segment(first: int, bookies: list[bytes]) -> bytes:
    return field_bytes(6, b"".join(field_bytes(1, b) for b in bookies) + field_varint(2, first))


def test_open_ledger_bytes() -> None:
    body = (
        field_varint(1, 2)  # quorumSize = Qw
        + field_varint(2, 3)  # ensembleSize
        + field_varint(3, 0)  # length
        # no lastEntryId (4) for a ledger that is not closed
        + field_varint(5, 1)  # state OPEN
        + segment(0, [b"a:1", b"b:2", b"c:3"])
        + field_varint(7, 3)  # digestType CRC32C
        + field_bytes(8, b"pw")
        + field_varint(9, 2)  # ackQuorumSize
        + field_varint(10, 1_700_000_000_000)  # ctime
        + field_bytes(11, field_bytes(1, b"app") + field_bytes(2, b"x"))
        + field_varint(12, 0)  # cToken
    )
    # Spot-check the hand encoding itself against literal bytes.
    assert body[:6] == b"\x08\x02\x10\x03\x18\x00"
    expected = HEADER + varint(len(body)) + body
    assert serialize(md()) == expected
    assert deserialize(expected) == md()


def test_closed_ledger_with_segments_bytes() -> None:
    closed = md(
        state=LedgerState.CLOSED,
        last_entry_id=199,
        length=4096,
        custom_metadata={},
        digest_type=DigestType.HMAC,
        segments=(Segment(0, ("a:1", "b:2", "c:3")), Segment(150, ("a:1", "d:4", "c:3"))),
    )
    body = (
        field_varint(1, 2)
        + field_varint(2, 3)
        + field_varint(3, 4096)
        + field_varint(4, 199)  # lastEntryId, closed only
        + field_varint(5, 3)  # CLOSED
        + segment(0, [b"a:1", b"b:2", b"c:3"])
        + segment(150, [b"a:1", b"d:4", b"c:3"])
        + field_varint(7, 2)  # HMAC
        + field_bytes(8, b"pw")
        + field_varint(9, 2)
        + field_varint(10, 1_700_000_000_000)
        + field_varint(12, 0)
    )
    expected = HEADER + varint(len(body)) + body
    assert serialize(closed) == expected
    assert deserialize(expected) == closed


def test_closed_empty_ledger_stores_minus_one() -> None:
    closed = md(state=LedgerState.CLOSED, last_entry_id=-1)
    data = serialize(closed)
    assert field_varint(4, -1) in data  # ten-byte int64 varint
    assert deserialize(data) == closed


def test_java_metadata_without_optional_fields() -> None:
    """Old BookKeeper metadata lacks ackQuorumSize/ctime/cToken: Qa defaults to Qw."""
    body = field_varint(1, 2) + field_varint(2, 2) + field_varint(3, 0) + field_varint(5, 1)
    body += segment(0, [b"x:1", b"y:2"])
    got = deserialize(HEADER + varint(len(body)) + body)
    assert (got.ensemble_size, got.write_quorum_size, got.ack_quorum_size) == (2, 2, 2)
    assert got.digest_type == DigestType.CRC32 and got.password == b"" and got.c_token == 0


def test_reads_v2_text_format() -> None:
    text = (
        b"BookieMetadataFormatVersion\t2\n"
        b'quorumSize: 2\nensembleSize: 3\nlength: 10\nlastEntryId: 4\nstate: CLOSED\n'
        b'segment { ensembleMember: "a:1" ensembleMember: "b:2" ensembleMember: "c:3" firstEntryId: 0 }\n'
        b"digestType: CRC32\npassword: \"pw\"\nackQuorumSize: 2\n"
    )
    got = deserialize(text)
    assert got.is_closed and got.last_entry_id == 4 and got.length == 10
    assert got.ensemble_for(3) == ("a:1", "b:2", "c:3")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        HEADER,  # no length
        HEADER + b"\x05\x08",  # length larger than what follows
        HEADER + varint(2) + b"\xff\xff",  # not a protobuf
        b"BookieMetadataFormatVersion\t9\n\x00",  # unknown version
        # valid protobuf, invalid metadata (Qa > Qw)
        HEADER + varint(10) + field_varint(1, 1) + field_varint(2, 1) + field_varint(3, 0)
        + field_varint(5, 1) + field_varint(9, 2),
    ],
)
def test_corrupt_data_names_ledger_and_path(data: bytes) -> None:
    with pytest.raises(CorruptLedgerMetadataError) as info:
        deserialize(data, 42, "/ledgers/00/0000/L0042")
    assert "ledger 42" in str(info.value) and "/ledgers/00/0000/L0042" in str(info.value)
