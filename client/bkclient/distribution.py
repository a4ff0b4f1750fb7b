"""BookKeeper's round-robin distribution schedule and the ack set of one add.

Entry ``e`` goes to the Qw consecutive bookies of the ensemble starting at ``e % E``: write-set slot
``w`` is bookie index ``(e + w) % E`` (``RoundRobinDistributionSchedule``). An add completes once Qa
distinct bookies of its write set acknowledged it.
"""

from __future__ import annotations

from bkproto.errors import IncorrectParameterError


def validate_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """E >= Qw >= Qa >= 1, else IncorrectParameterError naming the sizes."""
    if not ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise IncorrectParameterError(
            f"need ensemble >= write quorum >= ack quorum >= 1, got E={ensemble_size} "
            f"Qw={write_quorum} Qa={ack_quorum}"
        )


class RoundRobinDistribution:
    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        # Only E distinct write sets exist; precomputed because every add needs one.
        self._write_sets = tuple(
            tuple((first + w) % ensemble_size for w in range(write_quorum)) for first in range(ensemble_size)
        )

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        """Bookie indices (into the entry's ensemble) that store ``entry_id``, in slot order."""
        return self._write_sets[entry_id % self.ensemble_size]

    def has_entry(self, entry_id: int, bookie_index: int) -> bool:
        return (bookie_index - entry_id) % self.ensemble_size < self.write_quorum


class AckSet:
    """Which bookie indices acknowledged one add. Completes at ``ack_quorum`` distinct acks."""

    __slots__ = ("_ack_quorum", "_acked")

    def __init__(self, ack_quorum: int) -> None:
        self._ack_quorum = ack_quorum
        self._acked: set[int] = set()

    def complete_bookie(self, bookie_index: int) -> bool:
        """Record an ack; True once the ack quorum is reached."""
        self._acked.add(bookie_index)
        return len(self._acked) >= self._ack_quorum

    def remove_bookie(self, bookie_index: int) -> None:
        """Forget an ack (the bookie was replaced, its copy no longer counts)."""
        self._acked.discard(bookie_index)

    def has_acked(self, bookie_index: int) -> bool:
        return bookie_index in self._acked

    @property
    def complete(self) -> bool:
        return len(self._acked) >= self._ack_quorum

    @property
    def acked(self) -> frozenset[int]:
        return frozenset(self._acked)
