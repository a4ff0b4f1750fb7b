"""Quorum coverage: when the answers received prove that no acknowledged entry can hide."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkclient.coverage import QuorumCoverageSet, provably_absent
from bkproto.errors import IncorrectParameterError


def _hidden_ack_possible(e: int, w: int, a: int, known: set[int]) -> bool:
    """Brute force: could some entry have been acked by Qa bookies of its write set, all of
    which are still unknown?"""
    for first in range(e):
        window = [(first + j) % e for j in range(w)]
        for ackers in itertools.combinations(window, a):
            if not set(ackers) & known:
                return True
    return False


@st.composite
def quorums_and_answers(draw: st.DrawFn) -> tuple[int, int, int, set[int]]:
    e = draw(st.integers(1, 7))
    w = draw(st.integers(1, e))
    a = draw(st.integers(1, w))
    known = draw(st.sets(st.integers(0, e - 1)))
    return e, w, a, known


@given(quorums_and_answers())
def test_covered_exactly_when_no_acknowledged_entry_can_hide(case: tuple[int, int, int, set[int]]) -> None:
    e, w, a, known = case
    coverage = QuorumCoverageSet(e, w, a)
    for index in known:
        coverage.add_known(index)
    assert coverage.is_covered() == (not _hidden_ack_possible(e, w, a, known))


def test_nothing_known_is_not_covered() -> None:
    assert not QuorumCoverageSet(3, 2, 2).is_covered()


def test_e3_w2_a2_needs_two_answers() -> None:
    # Each window {0,1},{1,2},{2,0} must have at most one unknown bookie.
    coverage = QuorumCoverageSet(3, 2, 2)
    coverage.add_known(0)
    assert not coverage.is_covered()  # window {1,2} has two unknown
    coverage.add_known(2)
    assert coverage.is_covered()


def test_e3_w3_a2_needs_two_answers_and_a1_needs_all() -> None:
    coverage = QuorumCoverageSet(3, 3, 2)
    coverage.add_known(1)
    assert not coverage.is_covered()
    coverage.add_known(2)
    assert coverage.is_covered()
    strict = QuorumCoverageSet(3, 3, 1)
    strict.add_known(0)
    strict.add_known(1)
    assert not strict.is_covered()
    strict.add_known(2)
    assert strict.is_covered()


def test_invalid_quorums_rejected() -> None:
    with pytest.raises(IncorrectParameterError):
        QuorumCoverageSet(2, 3, 2)
    with pytest.raises(IncorrectParameterError):
        QuorumCoverageSet(3, 2, 0)


@pytest.mark.parametrize(
    ("missing", "w", "a", "absent"),
    [(1, 2, 2, True), (0, 2, 2, False), (1, 3, 2, False), (2, 3, 2, True), (3, 3, 1, True), (2, 3, 1, False)],
)
def test_provably_absent(missing: int, w: int, a: int, absent: bool) -> None:
    assert provably_absent(missing, w, a) is absent
