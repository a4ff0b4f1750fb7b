"""Journal records: round trip, and damaged records are detected, never returned."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkproto.entry_format import HEADER
from bookie.storage import journal_format
from bookie.storage.journal_format import (
    FILE_HEADER_SIZE,
    FileRecords,
    RecordType,
    ScanEnd,
    entry_record_header,
    entry_records,
    explicit_lac_record,
    fence_record,
    file_header,
    file_name,
    master_key_record,
    record,
    scan_end,
    scan_records,
)

BODY = HEADER.pack(7, 3, 2, 100) + b"x" * 100


def _journal() -> bytes:
    return b"".join(
        [
            file_header(1),
            master_key_record(7, b"k" * 20),
            entry_record_header(BODY),
            BODY,
            fence_record(7),
            explicit_lac_record(7, 2, b"lacbody"),
        ]
    )


def test_records_round_trip_and_end_clean_in_zero_fill() -> None:
    data = _journal() + bytes(4096)
    records = list(scan_records(data, FILE_HEADER_SIZE))
    assert [r[0] for r in records] == [
        RecordType.MASTER_KEY, RecordType.ENTRY, RecordType.FENCE, RecordType.EXPLICIT_LAC
    ]
    assert bytes(records[1][1]) == BODY
    assert bytes(records[0][1])[8:] == b"k" * 20
    assert bytes(records[3][1])[16:] == b"lacbody"
    assert scan_end(data, records[-1][2]) is ScanEnd.CLEAN


def test_a_batch_of_entry_records_is_the_records_of_its_entries_byte_for_byte() -> None:
    bodies = [HEADER.pack(7, i, i - 1, 100 * (i + 1)) + bytes([i]) * (i * 37) for i in range(5)]
    parts, nbytes, crcs = entry_records(bodies)
    expected = b"".join(record(RecordType.ENTRY, body) for body in bodies)
    assert b"".join(parts) == expected
    assert nbytes == len(expected)
    assert crcs == [crc32c.crc32c(body) for body in bodies]
    assert [bytes(payload) for _, payload, _ in scan_records(expected, 0)] == bodies
    assert entry_records([]) == ([], 0, [])


@settings(max_examples=300)
@given(bodies=st.lists(st.binary(max_size=3000), max_size=8), repeats=st.integers(1, 3))
def test_entry_records_from_the_bodies_crcs_are_the_records_byte_for_byte(
    bodies: list[bytes], repeats: int
) -> None:
    # each record's CRC is derived from its body's by a shift learnt per length: a length's
    # second body (other bytes), a shift table emptied when full, must all give the same bytes
    for _ in range(repeats):
        bodies = [bytes(reversed(body)) for body in bodies]
        parts, _, crcs = entry_records(bodies)
        assert b"".join(parts) == b"".join(record(RecordType.ENTRY, body) for body in bodies)
        assert crcs == [crc32c.crc32c(body) for body in bodies]


def test_the_shift_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_format, "_ENTRY_SHIFTS", {})
    monkeypatch.setattr(journal_format, "_MAX_ENTRY_SHIFTS", 4)
    bodies = [os.urandom(size) for size in range(10)]
    parts, _, _ = entry_records(bodies)
    assert b"".join(parts) == b"".join(record(RecordType.ENTRY, body) for body in bodies)
    assert 0 < len(journal_format._ENTRY_SHIFTS) <= 4


def test_torn_tail_is_cut() -> None:
    data = _journal()
    entry_end = FILE_HEADER_SIZE + len(master_key_record(7, b"k" * 20)) + 9 + len(BODY)
    torn = data[: entry_end - 10]
    records = list(scan_records(torn, FILE_HEADER_SIZE))
    assert [r[0] for r in records] == [RecordType.MASTER_KEY]
    assert scan_end(torn, records[-1][2]) is ScanEnd.TORN


def test_flipped_byte_stops_the_scan_at_that_record() -> None:
    data = bytearray(_journal())
    entry_start = FILE_HEADER_SIZE + len(master_key_record(7, b"k" * 20))
    data[entry_start + 9 + 50] ^= 0x01  # inside the entry body
    records = list(scan_records(bytes(data), FILE_HEADER_SIZE))
    assert [r[0] for r in records] == [RecordType.MASTER_KEY]
    assert scan_end(bytes(data), records[-1][2]) is ScanEnd.CORRUPT


def test_flipped_type_byte_is_detected() -> None:
    data = bytearray(_journal())
    data[FILE_HEADER_SIZE + 8] = RecordType.FENCE  # master-key record claims to be a fence
    assert list(scan_records(bytes(data), FILE_HEADER_SIZE)) == []


def test_a_file_read_in_windows_yields_every_record_across_the_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows of 100 bytes over records of 9 + 31 bytes: most windows end inside a record.
    monkeypatch.setattr(journal_format, "WINDOW", 100)
    path = tmp_path / file_name(3)
    payloads = [bytes([i]) * 31 for i in range(40)]
    with open(path, "wb") as f:
        f.write(file_header(3))
        for payload in payloads:
            f.write(record(RecordType.FENCE, payload))
        f.write(b"\0" * 50)  # the zero-filled area
    records = FileRecords(path, FILE_HEADER_SIZE)
    assert [bytes(p) for _, p, _ in records] == payloads
    assert records.why is ScanEnd.CLEAN and records.end == FILE_HEADER_SIZE + 40 * 40
    with open(path, "r+b") as f:  # a torn last record is still found as torn, not as a cut
        f.truncate(FILE_HEADER_SIZE + 39 * 40 + 20)
    records = FileRecords(path, FILE_HEADER_SIZE)
    assert len(list(records)) == 39 and records.why is ScanEnd.TORN
