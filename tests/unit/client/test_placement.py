from __future__ import annotations

import random

import pytest

from bkclient.placement import RackAwarePlacement, RandomPlacement, make_placement
from bkproto.errors import NotEnoughBookiesError

FLAT = {f"b{i}:3181": None for i in range(5)}


def test_random_ensemble_is_distinct_and_honours_exclusions() -> None:
    policy = RandomPlacement(random.Random(1))
    for _ in range(50):
        ensemble = policy.new_ensemble(3, 2, 2, FLAT, exclude={"b0:3181"})
        assert len(set(ensemble)) == 3
        assert "b0:3181" not in ensemble


def test_not_enough_bookies() -> None:
    policy = RandomPlacement()
    with pytest.raises(NotEnoughBookiesError):
        policy.new_ensemble(3, 2, 2, {"a:1": None, "b:1": None})
    with pytest.raises(NotEnoughBookiesError):
        policy.replace_bookie(["a:1", "b:1"], 0, 2, {"a:1": None, "b:1": None})


def test_random_replacement_avoids_ensemble_and_excluded() -> None:
    policy = RandomPlacement(random.Random(2))
    ensemble = ["b0:3181", "b1:3181", "b2:3181"]
    for _ in range(50):
        new = policy.replace_bookie(ensemble, 1, 2, FLAT, exclude={"b3:3181"})
        assert new == "b4:3181"


def _quorum_racks(ensemble: list[str], racks: dict[str, str | None], qw: int) -> list[int]:
    return [len({racks[ensemble[(s + w) % len(ensemble)]] for w in range(qw)}) for s in range(len(ensemble))]


def test_rack_aware_spreads_every_write_quorum_over_racks() -> None:
    racks: dict[str, str | None] = {"a1": "/r1", "a2": "/r1", "a3": "/r1", "b1": "/r2", "b2": "/r2"}
    policy = RackAwarePlacement(2, enforce=True, rng=random.Random(3))
    for _ in range(100):
        ensemble = policy.new_ensemble(4, 2, 2, racks)
        assert len(set(ensemble)) == 4
        assert min(_quorum_racks(ensemble, racks, 2)) == 2


def test_rack_aware_replacement_keeps_racks_apart() -> None:
    racks: dict[str, str | None] = {"a1": "/r1", "a2": "/r1", "b1": "/r2", "b2": "/r2", "c1": "/r3"}
    policy = RackAwarePlacement(2, enforce=True, rng=random.Random(4))
    for _ in range(50):
        new = policy.replace_bookie(["a1", "b1", "c1"], 2, 3, racks, exclude={"c1"})
        assert new in {"a2", "b2"}  # no third rack left: any keeps 2 racks per quorum
    # E=4 Qw=2: slot 1 sits between two /r1 bookies, so its replacement must come from /r2.
    racks2: dict[str, str | None] = {"a1": "/r1", "a2": "/r1", "a3": "/r1", "b1": "/r2", "b2": "/r2"}
    ensemble = ["a1", "b1", "a2", "b2"]
    with pytest.raises(NotEnoughBookiesError):  # only a3 (/r1) is left
        policy.replace_bookie(ensemble, 1, 2, racks2, exclude={"b1"})
    racks3 = racks2 | {"b3": "/r2", "a4": "/r1"}
    for _ in range(50):
        assert policy.replace_bookie(ensemble, 1, 2, racks3, exclude={"b1"}) == "b3"


def test_rack_aware_falls_back_when_not_enforced() -> None:
    racks: dict[str, str | None] = {"a1": "/r1", "a2": "/r1", "a3": "/r1"}
    policy = RackAwarePlacement(2, enforce=False)
    assert len(set(policy.new_ensemble(3, 2, 2, racks))) == 3


@pytest.mark.parametrize("racks", [{"a1": "/r1", "a2": "/r1", "a3": "/r1"}, FLAT])
def test_enforced_racks_are_not_lowered_to_the_racks_that_exist(racks: dict[str, str | None]) -> None:
    # One rack (or none registered: all on the default rack) cannot give 2 per write quorum.
    policy = RackAwarePlacement(2, enforce=True)
    with pytest.raises(NotEnoughBookiesError, match="min 2 racks per write quorum is enforced"):
        policy.new_ensemble(3, 2, 2, racks)
    ensemble = sorted(racks)[:3]
    with pytest.raises(NotEnoughBookiesError):
        policy.replace_bookie(ensemble, 0, 2, racks, exclude={ensemble[0]})
    # A write quorum of 1 never needs more than one rack.
    assert len(policy.new_ensemble(3, 1, 1, racks)) == 3


def test_make_placement_by_name() -> None:
    assert isinstance(make_placement("random"), RandomPlacement)
    assert isinstance(make_placement("rackaware"), RackAwarePlacement)
    with pytest.raises(ValueError, match="unknown placement"):
        make_placement("zoneaware")
