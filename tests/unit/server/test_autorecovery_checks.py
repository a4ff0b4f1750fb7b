"""The auditor's pure parts: where BookKeeper keeps an under-replication marker and what it
holds, and which entries a bookie of a striped ledger should hold (the ledger check's baseline)."""

from __future__ import annotations

import pytest

from autorecovery.checks import expected_entries, not_held, rack_shortfalls
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkmeta.underreplication import (
    CorruptUnderreplicationMarkerError,
    decode_marker,
    encode_marker,
    marker_relative_path,
)


def test_marker_paths_split_the_id_in_four_hex_groups_as_bookkeeper_does() -> None:
    assert marker_relative_path(1) == "0000/0000/0000/0001/urL0000000001"
    assert marker_relative_path(0x1_0002_0003_0004) == "0001/0002/0003/0004/urL281483566841860"


def test_marker_data_is_bookkeepers_text_format_and_reads_back() -> None:
    data = encode_marker(frozenset({"b:2", "a:1"}), 1234)
    assert data == b'replica: "a:1"\nreplica: "b:2"\nctime: 1234\n'
    assert decode_marker("/p", data) == (frozenset({"a:1", "b:2"}), 1234)
    with pytest.raises(CorruptUnderreplicationMarkerError):
        decode_marker("/p", b"garbage")


def _closed(segments: tuple[Segment, ...], last: int) -> LedgerMetadata:
    return LedgerMetadata(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, state=LedgerState.CLOSED,
                          last_entry_id=last, length=0, digest_type=DigestType.CRC32C, password=b"pw",
                          ctime=1, segments=segments)


def test_a_bookie_should_hold_the_entries_whose_write_set_takes_its_slot_in_each_segment() -> None:
    md = _closed((Segment(0, ("a:1", "b:2", "c:3")), Segment(6, ("a:1", "d:4", "c:3"))), 8)
    # E3 Qw2: entry e goes to slots e%3 and (e+1)%3
    assert expected_entries(md, "a:1", 8) == [0, 2, 3, 5, 6, 8]
    assert expected_entries(md, "b:2", 8) == [0, 1, 3, 4]  # replaced at entry 6
    assert expected_entries(md, "d:4", 8) == [6, 7]
    assert expected_entries(md, "x:9", 8) == []


def test_not_held_is_what_the_runs_leave_out() -> None:
    assert not_held([0, 2, 3, 5, 6, 8], [(0, 2), (5, 5), (8, 10)]) == [3, 6]
    assert not_held([1, 2], []) == [1, 2]


def test_the_placement_check_finds_write_quorums_on_too_few_racks() -> None:
    md = _closed((Segment(0, ("a:1", "b:2", "c:3")), Segment(6, ("a:1", "d:4", "c:3"))), 8)
    racks = {"a:1": "/r1", "b:2": "/r2", "c:3": "/r1", "d:4": "/r1"}
    # E3 Qw2: the write quorums are slots (0,1), (1,2), (2,0); (2,0) = c, a both on /r1
    assert rack_shortfalls(md, racks, 2) == [0, 6]
    assert rack_shortfalls(md, {**racks, "c:3": "/r3", "d:4": "/r2"}, 2) == []
    assert rack_shortfalls(md, dict.fromkeys(racks, "/r1"), 2) == []  # one rack: nothing better exists
