from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkclient import digest
from bkclient.digest import DigestManager, master_key
from bkproto.errors import DigestMismatchError, IncorrectParameterError

ALL_TYPES = [digest.CRC32, digest.HMAC, digest.CRC32C, digest.DUMMY]
HEADER = struct.Struct(">qqqq")


def test_master_key_is_bookkeepers_ledger_key() -> None:
    assert master_key(b"pw") == hashlib.sha1(b"ledgerpw").digest()
    # BookKeeper: an empty password gives SHA1("ledger").
    assert master_key(b"") == hashlib.sha1(b"ledger").digest()
    assert len(master_key(b"x")) == 20


def test_crc32_check_value_layout() -> None:
    # The standard CRC-32 check value of "123456789" is 0xCBF43926; BookKeeper writes it as a long.
    assert digest._crc32(b"1234", b"56789") == struct.pack(">Q", 0xCBF43926)


def test_crc32c_check_value_layout() -> None:
    # The standard CRC-32C (Castagnoli) check value of "123456789" is 0xE3069283, written as an int.
    assert digest._crc32c(b"12345", b"6789") == struct.pack(">I", 0xE3069283)


@pytest.mark.parametrize(
    ("digest_type", "size"),
    [(digest.CRC32, 8), (digest.HMAC, 20), (digest.CRC32C, 4), (digest.DUMMY, 0)],
)
def test_entry_layout_is_header_digest_payload(digest_type: int, size: int) -> None:
    dm = DigestManager(7, b"secret", digest_type)
    body = dm.encode_entry(3, 2, 100, b"hello")
    assert len(body) == 32 + size + 5
    assert HEADER.unpack_from(body) == (7, 3, 2, 100)
    assert body.endswith(b"hello")
    header, dig = body[:32], body[32 : 32 + size]
    signed = header + b"hello"
    if digest_type == digest.CRC32:
        assert dig == struct.pack(">Q", zlib.crc32(signed))
    elif digest_type == digest.CRC32C:
        assert dig == struct.pack(">I", crc32c.crc32c(signed))
    elif digest_type == digest.HMAC:
        key = hashlib.sha1(b"macsecret").digest()
        assert dig == hmac.new(key, signed, hashlib.sha1).digest()
    else:
        assert dig == b""


@pytest.mark.parametrize("digest_type", ALL_TYPES)
def test_round_trip(digest_type: int) -> None:
    dm = DigestManager(42, b"pw", digest_type)
    body = dm.encode_entry(5, 4, 2048, b"x" * 1024)
    payload, lac, length = dm.verify_entry(5, body)
    assert (payload, lac, length) == (b"x" * 1024, 4, 2048)
    header = dm.verify_header(body)
    assert (header.entry_id, header.last_add_confirmed, header.length) == (5, 4, 2048)


@pytest.mark.parametrize("digest_type", ALL_TYPES)
@given(
    first=st.integers(min_value=0, max_value=2**62),
    lac=st.integers(min_value=-1, max_value=2**62),
    payloads=st.lists(st.binary(max_size=80), min_size=1, max_size=20),
)
def test_a_batch_encodes_each_entry_as_one_by_one(
    digest_type: int, first: int, lac: int, payloads: list[bytes]
) -> None:
    """The add path encodes a batch in C-level passes; each body must be what encode_entry gives."""
    dm = DigestManager(9, b"pw", digest_type)
    ids = list(range(first, first + len(payloads)))
    lengths = [first + i * 100 for i in range(len(payloads))]
    expected = [dm.encode_entry(e, lac, n, p) for e, n, p in zip(ids, lengths, payloads, strict=True)]
    assert dm.encode_entries(ids, lac, iter(lengths), iter(payloads)) == expected


@pytest.mark.parametrize("digest_type", [digest.CRC32, digest.HMAC, digest.CRC32C])
@given(flip=st.integers(min_value=0, max_value=32 + 20 + 63), payload=st.binary(min_size=1, max_size=64))
def test_any_flipped_byte_is_detected(digest_type: int, flip: int, payload: bytes) -> None:
    dm = DigestManager(1, b"pw", digest_type)
    body = bytearray(dm.encode_entry(0, -1, len(payload), payload))
    pos = flip % len(body)
    body[pos] ^= 0x01
    with pytest.raises(DigestMismatchError):
        dm.verify_entry(0, bytes(body))


@pytest.mark.parametrize("digest_type", ALL_TYPES)
def test_wrong_entry_or_ledger_id_is_a_mismatch(digest_type: int) -> None:
    dm = DigestManager(1, b"pw", digest_type)
    body = dm.encode_entry(3, 2, 10, b"data")
    with pytest.raises(DigestMismatchError, match="entry 4"):
        dm.verify_entry(4, body)
    other_ledger = DigestManager(2, b"pw", digest_type)
    with pytest.raises(DigestMismatchError):
        other_ledger.verify_entry(3, body)


def test_wrong_password_is_a_mismatch_for_hmac() -> None:
    body = DigestManager(1, b"right", digest.HMAC).encode_entry(0, -1, 4, b"data")
    with pytest.raises(DigestMismatchError):
        DigestManager(1, b"wrong", digest.HMAC).verify_entry(0, body)


@pytest.mark.parametrize("digest_type", ALL_TYPES)
def test_truncated_body_is_a_mismatch(digest_type: int) -> None:
    dm = DigestManager(1, b"pw", digest_type)
    with pytest.raises(DigestMismatchError):
        dm.verify_entry(0, b"\x00" * 20)


@pytest.mark.parametrize(
    ("digest_type", "size"),
    [(digest.CRC32, 8), (digest.HMAC, 20), (digest.CRC32C, 4), (digest.DUMMY, 0)],
)
def test_lac_round_trip_and_layout(digest_type: int, size: int) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    body = dm.encode_lac(77)
    assert len(body) == 16 + size
    assert struct.unpack_from(">qq", body) == (9, 77)
    assert dm.verify_lac(body) == 77
    with pytest.raises(DigestMismatchError):
        DigestManager(10, b"pw", digest_type).verify_lac(body)


@pytest.mark.parametrize("digest_type", [digest.CRC32, digest.HMAC, digest.CRC32C])
def test_corrupt_lac_is_a_mismatch(digest_type: int) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    body = bytearray(dm.encode_lac(77))
    body[12] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        dm.verify_lac(bytes(body))


def test_unknown_digest_type_is_rejected() -> None:
    with pytest.raises(IncorrectParameterError):
        DigestManager(1, b"", 99)


def _bodies(dm: DigestManager, first: int, stride: int, count: int) -> list[bytes]:
    return [dm.encode_entry(first + i * stride, -1, i, bytes([i]) * (i + 1)) for i in range(count)]


@pytest.mark.parametrize("digest_type", ALL_TYPES)
@pytest.mark.parametrize("stride", [1, 3])
def test_verify_entries_returns_every_payload_in_order(digest_type: int, stride: int) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    payloads, error = dm.verify_entries(10, stride, _bodies(dm, 10, stride, 5))
    assert error is None
    assert payloads == [bytes([i]) * (i + 1) for i in range(5)]


@pytest.mark.parametrize("digest_type", [digest.CRC32, digest.HMAC, digest.CRC32C])
@given(
    bad=st.integers(min_value=0, max_value=4),
    flip=st.integers(min_value=0, max_value=32 + 20 + 4),
)
def test_verify_entries_stops_at_the_first_corrupt_body(digest_type: int, bad: int, flip: int) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    bodies = _bodies(dm, 0, 1, 5)
    corrupt = bytearray(bodies[bad])
    corrupt[flip % len(corrupt)] ^= 0x01
    bodies[bad] = bytes(corrupt)
    payloads, error = dm.verify_entries(0, 1, bodies)
    assert isinstance(error, DigestMismatchError)
    assert payloads == [bytes([i]) * (i + 1) for i in range(bad)]


@pytest.mark.parametrize("digest_type", ALL_TYPES)
def test_verify_entries_refuses_a_body_of_another_entry_ledger_or_a_short_one(digest_type: int) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    bodies = _bodies(dm, 0, 1, 3)
    # the bookie skipped entry 1: entry 2's body where entry 1's should be
    payloads, error = dm.verify_entries(0, 1, [bodies[0], bodies[2]])
    assert len(payloads) == 1
    assert error is not None and "entry 1" in str(error)
    other = DigestManager(8, b"pw", digest_type).encode_entry(1, -1, 1, b"x")
    payloads, error = dm.verify_entries(0, 1, [bodies[0], other])
    assert len(payloads) == 1 and isinstance(error, DigestMismatchError)
    payloads, error = dm.verify_entries(0, 1, [b"\x00" * 20])
    assert payloads == [] and isinstance(error, DigestMismatchError)


@pytest.mark.parametrize("digest_type", [digest.CRC32, digest.CRC32C])
@given(
    count=st.integers(min_value=0, max_value=8),
    stride=st.integers(min_value=1, max_value=3),
    damage=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 80)), max_size=2),
    cut=st.none() | st.tuples(st.integers(0, 7), st.integers(0, 60)),
)
def test_verify_entries_in_bulk_equals_verifying_body_by_body(
    digest_type: int, count: int, stride: int, damage: list[tuple[int, int]], cut: tuple[int, int] | None
) -> None:
    dm = DigestManager(9, b"pw", digest_type)
    bodies = _bodies(dm, 4, stride, count)
    for index, flip in damage:
        if index < count:
            changed = bytearray(bodies[index])
            changed[flip % len(changed)] ^= 0x10
            bodies[index] = bytes(changed)
    if cut is not None and cut[0] < count:
        bodies[cut[0]] = bodies[cut[0]][: cut[1]]
    payloads, error = dm.verify_entries(4, stride, bodies)
    one_by_one, first_error = dm._verify_each(4, stride, bodies)
    assert payloads == one_by_one
    assert str(error) == str(first_error)
