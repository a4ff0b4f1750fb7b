from __future__ import annotations

import pytest

from bkclient.distribution import RoundRobinDistribution
from bkproto.errors import IncorrectParameterError


def test_write_set_is_round_robin_from_entry_mod_ensemble() -> None:
    d = RoundRobinDistribution(3, 2, 2)
    assert [d.write_set(e) for e in range(4)] == [(0, 1), (1, 2), (2, 0), (0, 1)]
    d5 = RoundRobinDistribution(5, 3, 2)
    assert d5.write_set(4) == (4, 0, 1)
    assert d5.write_set(12) == (2, 3, 4)


def test_has_entry_matches_write_set() -> None:
    d = RoundRobinDistribution(5, 3, 2)
    for entry in range(20):
        for index in range(5):
            assert d.has_entry(entry, index) == (index in d.write_set(entry))


@pytest.mark.parametrize(("e", "w", "a"), [(2, 3, 2), (3, 2, 3), (3, 0, 0), (3, 2, 0)])
def test_quorums_must_satisfy_e_ge_qw_ge_qa(e: int, w: int, a: int) -> None:
    with pytest.raises(IncorrectParameterError):
        RoundRobinDistribution(e, w, a)
