"""Ensemble placement: which bookies store a new ledger, and who replaces a failed one.

``RandomPlacement`` is BookKeeper's ``DefaultEnsemblePlacementPolicy`` (uniform choice).
``RackAwarePlacement`` follows ``RackawareEnsemblePlacementPolicy``'s intent: every write quorum
(Qw consecutive ensemble slots, wrapping around) should span ``min_racks_per_write_quorum`` racks.
It fills slots greedily, preferring bookies whose rack differs from the racks already in the slot's
write quorums; when that is impossible it takes any bookie, or raises NotEnoughBookiesError if the
rule is enforced. Racks come from the bookies' registration info (None = the default rack).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from bkproto.errors import NotEnoughBookiesError

from .distribution import validate_quorums

DEFAULT_RACK = "/default-rack"

# bookie id -> rack (None when the bookie did not register one)
BookieRacks = Mapping[str, str | None]


class PlacementPolicy(Protocol):
    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> list[str]:
        """``ensemble_size`` distinct bookies from ``bookies`` minus ``exclude``."""
        ...

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> str:
        """A bookie for slot ``index`` of ``ensemble``: not in the ensemble, not excluded."""
        ...


def _candidates(bookies: BookieRacks, taken: Collection[str], exclude: Collection[str]) -> list[str]:
    return [b for b in bookies if b not in taken and b not in exclude]


def _ensemble_candidates(
    ensemble_size: int, write_quorum: int, ack_quorum: int, bookies: BookieRacks, exclude: Collection[str]
) -> list[str]:
    """The bookies a new ensemble may use, after checking E >= Qw >= Qa and that there are enough."""
    validate_quorums(ensemble_size, write_quorum, ack_quorum)
    candidates = _candidates(bookies, (), exclude)
    if len(candidates) < ensemble_size:
        raise NotEnoughBookiesError(
            f"need {ensemble_size} bookies, {len(candidates)} available: {sorted(candidates)}"
        )
    return candidates


def _replacement_candidates(
    ensemble: Sequence[str], index: int, bookies: BookieRacks, exclude: Collection[str]
) -> list[str]:
    """The bookies that may replace ``ensemble[index]``: not in the ensemble, not excluded."""
    candidates = _candidates(bookies, ensemble, exclude)
    if not candidates:
        raise NotEnoughBookiesError(
            f"no bookie available to replace {ensemble[index]} (ensemble {list(ensemble)})"
        )
    return candidates


class RandomPlacement:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> list[str]:
        candidates = _ensemble_candidates(ensemble_size, write_quorum, ack_quorum, bookies, exclude)
        return self._rng.sample(candidates, ensemble_size)

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> str:
        candidates = _replacement_candidates(ensemble, index, bookies, exclude)
        return self._rng.choice(candidates)


class RackAwarePlacement:
    def __init__(
        self, min_racks_per_write_quorum: int = 2, enforce: bool = False, rng: random.Random | None = None
    ) -> None:
        self._min_racks = min_racks_per_write_quorum
        self._enforce = enforce
        self._rng = rng or random.Random()

    @staticmethod
    def _rack(bookies: BookieRacks, bookie: str | None) -> str | None:
        if bookie is None:
            return None
        return bookies.get(bookie) or DEFAULT_RACK

    def _neighbour_racks(
        self, slots: Sequence[str | None], index: int, write_quorum: int, bookies: BookieRacks
    ) -> set[str]:
        """Racks of the filled slots sharing a write quorum with slot ``index``."""
        size = len(slots)
        racks: set[str] = set()
        for offset in range(1, write_quorum):
            for neighbour in ((index - offset) % size, (index + offset) % size):
                rack = self._rack(bookies, slots[neighbour]) if neighbour != index else None
                if rack is not None:
                    racks.add(rack)
        return racks

    def _quorums_satisfied(
        self,
        slots: Sequence[str | None],
        index: int,
        candidate: str,
        write_quorum: int,
        wanted: int,
        bookies: BookieRacks,
    ) -> bool:
        """Can every write quorum holding slot ``index`` still span ``wanted`` racks with
        ``candidate`` there? Empty slots count as racks still to come."""
        size = len(slots)
        for start in range(index - write_quorum + 1, index + 1):
            racks: set[str | None] = set()
            empty = 0
            for offset in range(write_quorum):
                slot = (start + offset) % size
                bookie = candidate if slot == index else slots[slot]
                if bookie is None:
                    empty += 1
                else:
                    racks.add(self._rack(bookies, bookie))
            if len(racks) + empty < wanted:
                return False
        return True

    def _pick(
        self,
        slots: Sequence[str | None],
        index: int,
        write_quorum: int,
        bookies: BookieRacks,
        candidates: list[str],
    ) -> str:
        avoid = self._neighbour_racks(slots, index, write_quorum, bookies)
        # Best: a rack no write-quorum neighbour uses.
        preferred = [b for b in candidates if self._rack(bookies, b) not in avoid]
        if preferred:
            return self._rng.choice(preferred)
        # Next: any bookie that keeps every quorum able to span the wanted number of racks.
        # Enforced, that is min(minNumRacksPerWriteQuorum, Qw) whatever racks exist (BookKeeper
        # then refuses the ensemble); otherwise at most the racks the usable bookies are on.
        wanted = min(self._min_racks, write_quorum)
        if not self._enforce:
            usable = {self._rack(bookies, b) for b in [*candidates, *slots] if b is not None}
            wanted = min(wanted, len(usable))
        acceptable = [
            b for b in candidates if self._quorums_satisfied(slots, index, b, write_quorum, wanted, bookies)
        ]
        if acceptable:
            return self._rng.choice(acceptable)
        if self._enforce:
            raise NotEnoughBookiesError(
                f"no bookie keeps {wanted} racks in the write quorums of slot {index}; "
                f"min {self._min_racks} racks per write quorum is enforced"
            )
        return self._rng.choice(candidates)

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> list[str]:
        candidates = _ensemble_candidates(ensemble_size, write_quorum, ack_quorum, bookies, exclude)
        slots: list[str | None] = [None] * ensemble_size
        for index in range(ensemble_size):
            chosen = self._pick(slots, index, write_quorum, bookies, candidates)
            slots[index] = chosen
            candidates.remove(chosen)
        return [s for s in slots if s is not None]

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        bookies: BookieRacks,
        exclude: Collection[str] = (),
    ) -> str:
        candidates = _replacement_candidates(ensemble, index, bookies, exclude)
        slots: list[str | None] = list(ensemble)
        slots[index] = None
        return self._pick(slots, index, write_quorum, bookies, candidates)


def make_placement(name: str, min_racks_per_write_quorum: int = 2, enforce: bool = False) -> PlacementPolicy:
    if name == "random":
        return RandomPlacement()
    if name == "rackaware":
        return RackAwarePlacement(min_racks_per_write_quorum, enforce)
    raise ValueError(f"unknown placement policy {name!r}")
