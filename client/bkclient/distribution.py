"""BookKeeper's round-robin distribution schedule.

Entry ``e`` goes to the Qw consecutive bookies of the ensemble starting at ``e % E``: write-set slot
``w`` is bookie index ``(e + w) % E`` (``RoundRobinDistributionSchedule``). An add completes once Qa
distinct bookies of its write set acknowledged it (``ops.add.PendingAddOp`` counts them).
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
