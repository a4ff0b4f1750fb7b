"""Ledger znode paths follow BookKeeper's (long-)hierarchical layout exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkmeta.layout import (
    INT_MAX,
    BadLedgerPathError,
    ZkLayout,
    ledger_relative_path,
    parse_ledger_relative_path,
)


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "00/0000/L0000"),
        (1, "00/0000/L0001"),
        (12345, "00/0001/L2345"),
        (1234567890, "12/3456/L7890"),
        (INT_MAX - 1, "21/4748/L3646"),
        # Integer.MAX_VALUE and beyond: long layout (StringUtils.getHybridHierarchicalLedgerPath).
        (INT_MAX, "000/0000/0021/4748/L3647"),
        (2**32 + 1, "000/0000/0042/9496/L7297"),
        (2**63 - 1, "922/3372/0368/5477/L5807"),
    ],
)
def test_known_paths(ledger_id: int, path: str) -> None:
    assert ledger_relative_path(ledger_id) == path
    assert parse_ledger_relative_path(path) == ledger_id


def test_absolute_paths_under_root() -> None:
    layout = ZkLayout("/ledgers")
    assert layout.ledger(1) == "/ledgers/00/0000/L0001"
    assert layout.parse_ledger("/ledgers/00/0000/L0001") == 1
    assert layout.idgen_prefix == "/ledgers/idgen/ID-"
    assert layout.idgen_long_hob(1) == "/ledgers/idgen-long/HOB-0000000001"
    assert layout.writable_bookie("h:1") == "/ledgers/available/h:1"
    assert layout.readonly_bookie("h:1") == "/ledgers/available/readonly/h:1"
    assert layout.cookie("h:1") == "/ledgers/cookies/h:1"
    assert (layout.layout, layout.instance_id) == ("/ledgers/LAYOUT", "/ledgers/INSTANCEID")
    assert ZkLayout("/a/b").ledger(5) == "/a/b/00/0000/L0005"


@pytest.mark.parametrize(
    "bad",
    ["00/0000/0001", "0/0000/L0001", "00/000/L0001", "00/0000/L001", "ab/0000/L0001", "00/0000", "",
     # a short-layout path for an id that must be long, and the reverse
     "21/4748/L3647", "000/0000/0000/0000/L0001"],
)
def test_rejects_bad_paths(bad: str) -> None:
    with pytest.raises(BadLedgerPathError):
        parse_ledger_relative_path(bad)


def test_rejects_out_of_range_ids() -> None:
    with pytest.raises(ValueError):
        ledger_relative_path(-1)
    with pytest.raises(ValueError):
        ledger_relative_path(2**63)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_round_trip(ledger_id: int) -> None:
    assert parse_ledger_relative_path(ledger_relative_path(ledger_id)) == ledger_id


@given(st.integers(min_value=0, max_value=2**63 - 2))
def test_path_order_is_id_order(ledger_id: int) -> None:
    # GC iterates znodes in path order within each layout; it must equal id order.
    a, b = ledger_relative_path(ledger_id), ledger_relative_path(ledger_id + 1)
    if (ledger_id < INT_MAX) == (ledger_id + 1 < INT_MAX):
        assert a < b
