"""Ledger metadata validation and the value-returning changes the client relies on."""

from __future__ import annotations

import pytest

from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkproto.errors import IncorrectParameterError

E3 = ("a:1", "b:2", "c:3")


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
        "ctime": 1,
        "segments": (Segment(0, E3),),
    }
    fields.update(overrides)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"ensemble_size": 2},  # segment has 3 bookies, and E < Qw is fine here but the segment is not
        {"write_quorum_size": 4},  # Qw > E
        {"ack_quorum_size": 3},  # Qa > Qw
        {"ack_quorum_size": 0},
        {"segments": ()},
        {"segments": (Segment(1, E3),)},  # must start at entry 0
        {"segments": (Segment(0, E3), Segment(0, E3))},  # not strictly sorted
        {"segments": (Segment(0, E3), Segment(5, ("a:1", "b:2")))},  # wrong ensemble size
        {"segments": (Segment(0, ("a:1", "a:1", "c:3")),)},  # repeated bookie
        {"last_entry_id": -2},
        {"length": -1},
    ],
)
def test_invalid_metadata_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(IncorrectParameterError):
        md(**bad)


def test_ensemble_for_entry() -> None:
    m = md(segments=(Segment(0, E3), Segment(10, ("d:4", "b:2", "c:3")), Segment(20, ("d:4", "e:5", "c:3"))))
    assert m.ensemble_for(0) == E3
    assert m.ensemble_for(9) == E3
    assert m.ensemble_for(10) == ("d:4", "b:2", "c:3")
    assert m.ensemble_for(19) == ("d:4", "b:2", "c:3")
    assert m.ensemble_for(10**9) == ("d:4", "e:5", "c:3")
    assert m.last_ensemble == ("d:4", "e:5", "c:3")


def test_ensemble_change_appends_or_replaces_last_segment() -> None:
    m = md()
    changed = m.with_ensemble_change(5, ("d:4", "b:2", "c:3"))
    assert changed.segments == (Segment(0, E3), Segment(5, ("d:4", "b:2", "c:3")))
    again = changed.with_ensemble_change(5, ("d:4", "e:5", "c:3"))
    assert again.segments == (Segment(0, E3), Segment(5, ("d:4", "e:5", "c:3")))
    with pytest.raises(IncorrectParameterError):
        again.with_ensemble_change(4, E3)
    assert m.segments == (Segment(0, E3),)  # the original is unchanged


def test_close_and_state() -> None:
    m = md()
    assert not m.is_closed
    recovering = m.with_state(LedgerState.IN_RECOVERY)
    assert recovering.state == LedgerState.IN_RECOVERY and not recovering.is_closed
    closed = recovering.with_closed(41, 4200)
    assert closed.is_closed and closed.last_entry_id == 41 and closed.length == 4200


def test_values_are_immutable_and_normalised() -> None:
    custom = {"k": b"v"}
    m = md(custom_metadata=custom, state=1, digest_type=3, password=bytearray(b"pw"))
    custom["k"] = b"changed"
    assert m.custom_metadata["k"] == b"v"
    assert m.state is LedgerState.OPEN and m.digest_type is DigestType.CRC32C
    assert m == md(custom_metadata={"k": b"v"})
    with pytest.raises(TypeError):
        m.custom_metadata["k"] = b"x"  # type: ignore[index]
