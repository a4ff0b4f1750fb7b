"""Metadata bytes are BookKeeper's format v3, built here by hand from DataFormats.proto field numbers
(never with our encoder), so a mistake in the encoder cannot hide in the expectation."""

from __future__ import annotations

import base64

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
        + field_varint(4, -1)  # lastEntryId: Java writes it always, -1 while open
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
        + field_varint(4, 199)  # lastEntryId
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


# BookKeeper's own samples, written by Java (apache/bookkeeper TestLedgerMetadataSerDe): ledger
# metadata as 4.0-4.1 (v1), 4.2-4.3 (v2), 4.4-4.8 (v2 with ctime) and 4.9+ (v3) stored it.
JAVA_V1 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTEKMgozCjAKMAkxOTIuMC4yLjE6MTIzNAkxOTIu"
    "MC4yLjI6MTIzNAkxOTIuMC4yLjM6MTIzNAotMTAyCUNMT1NFRA=="
)
JAVA_V2 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTIKcXVvcnVtU2l6ZTogMgplbnNlbWJsZVNpemU6I"
    "DMKbGVuZ3RoOiAwCmxhc3RFbnRyeUlkOiAtMQpzdGF0ZTogSU5fUkVDT1ZFUlkKc2VnbWVudCB7"
    "CiAgZW5zZW1ibGVNZW1iZXI6ICIxOTIuMC4yLjE6MTIzNCIKICBlbnNlbWJsZU1lbWJlcjogIjE"
    "5Mi4wLjIuMjoxMjM0IgogIGVuc2VtYmxlTWVtYmVyOiAiMTkyLjAuMi4zOjEyMzQiCiAgZmlyc3"
    "RFbnRyeUlkOiAwCn0KZGlnZXN0VHlwZTogQ1JDMzIKcGFzc3dvcmQ6ICJwYXNzd2QiCmFja1F1b"
    "3J1bVNpemU6IDIK"
)
JAVA_V2_CTIME = JAVA_V2 + "Y3RpbWU6IDE1NDQwMDIzODMwNzUK"
JAVA_V3 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTMKYAgCEAMYACD///////////8BKAEyMgoOMTkyL"
    "jAuMi4xOjMxODEKDjE5Mi4wLjIuMjozMTgxCg4xOTIuMC4yLjM6MzE4MRAAOANCBmZvb2JhckgB"
    "UP///////////wFgAA=="
)
_JAVA_OLD_ENSEMBLE = ("192.0.2.1:1234", "192.0.2.2:1234", "192.0.2.3:1234")


def test_java_v1_metadata_decodes() -> None:
    got = deserialize(base64.b64decode(JAVA_V1))
    assert got.state == LedgerState.IN_RECOVERY  # "-102<TAB>CLOSED" is v1's in-recovery mark
    assert (got.ensemble_size, got.write_quorum_size, got.ack_quorum_size) == (3, 2, 2)
    assert got.segments == (Segment(0, _JAVA_OLD_ENSEMBLE),)
    assert got.digest_type == DigestType.CRC32 and got.password == b""


def test_java_v1_closed_ledger_decodes() -> None:
    data = b"BookieMetadataFormatVersion\t1\n2\n3\n4096\n0\ta:1\tb:2\tc:3\n7\ta:1\td:4\tc:3\n9\tCLOSED"
    got = deserialize(data)
    assert got.is_closed and got.last_entry_id == 9 and got.length == 4096
    assert got.ensemble_for(8) == ("a:1", "d:4", "c:3")


@pytest.mark.parametrize("sample", [JAVA_V2, JAVA_V2_CTIME], ids=["v2", "v2-ctime"])
def test_java_v2_metadata_decodes(sample: str) -> None:
    got = deserialize(base64.b64decode(sample))
    assert got.state == LedgerState.IN_RECOVERY and got.last_entry_id == -1
    assert (got.ensemble_size, got.write_quorum_size, got.ack_quorum_size) == (3, 2, 2)
    assert got.segments == (Segment(0, _JAVA_OLD_ENSEMBLE),)
    assert got.digest_type == DigestType.CRC32 and got.password == b"passwd"
    assert got.ctime == (1544002383075 if sample == JAVA_V2_CTIME else 0)


def test_java_v3_metadata_reencodes_byte_for_byte() -> None:
    got = deserialize(base64.b64decode(JAVA_V3))
    assert got.state == LedgerState.OPEN and got.ack_quorum_size == 1 and got.password == b"foobar"
    assert base64.b64encode(serialize(got)).decode() == JAVA_V3


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        HEADER,  # no length
        HEADER + b"\x05\x08",  # length larger than what follows
        HEADER + varint(2) + b"\xff\xff",  # not a protobuf
        b"BookieMetadataFormatVersion\t9\n\x00",  # unknown version
        b"BookieMetadataFormatVersion\tfoobar\nblahblah",  # junk version (as Java's test)
        b"BookieMetadataFormatVersion\t1\n2\n3",  # v1 cut short
        b"BookieMetadataFormatVersion\t1\n2\n3\n0\nno-tab-here",  # v1 line without fields
        # valid protobuf, invalid metadata (Qa > Qw)
        HEADER + varint(10) + field_varint(1, 1) + field_varint(2, 1) + field_varint(3, 0)
        + field_varint(5, 1) + field_varint(9, 2),
    ],
)
def test_corrupt_data_names_ledger_and_path(data: bytes) -> None:
    with pytest.raises(CorruptLedgerMetadataError) as info:
        deserialize(data, 42, "/ledgers/00/0000/L0042")
    assert "ledger 42" in str(info.value) and "/ledgers/00/0000/L0042" in str(info.value)


def test_decoded_metadata_equals_the_written_value_and_cannot_be_changed() -> None:
    written = md(state=LedgerState.CLOSED, last_entry_id=9, length=90,
                 segments=(Segment(0, ("a:1", "b:2", "c:3")), Segment(5, ("a:1", "b:2", "d:4"))))
    read = deserialize(serialize(written), 7, "/ledgers/00/0000/L0007")
    assert read == written
    assert read.state is LedgerState.CLOSED and read.digest_type is DigestType.CRC32C
    assert read.ensemble_for(6) == ("a:1", "b:2", "d:4")
    with pytest.raises(TypeError):
        read.custom_metadata["app"] = b"changed"  # type: ignore[index]
    assert read.with_closed(10, 100).custom_metadata == {"app": b"x"}

