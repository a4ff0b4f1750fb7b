"""BookKeeper's quorum coverage rule (``RRQuorumCoverageSet``), used by LAC reads and recovery.

With round-robin striping an entry lives on Qw consecutive bookies of the ensemble and is
acknowledged once Qa of them stored it. A set of answers *covers* the ensemble when no write quorum
(window ``i .. i+Qw-1``) has Qa or more bookies whose state is unknown: otherwise those unknown
bookies could together hold an acknowledged entry that nobody has told us about. "Known" means the
bookie answered OK, NoSuchEntry or NoSuchLedger; a bookie that failed, timed out or has not answered
yet is unknown.

The same reasoning decides when one entry is *provably absent*: if at least ``Qw - Qa + 1`` bookies
of its write set say they do not have it, fewer than Qa can hold it, so it was never acknowledged.
"""

from __future__ import annotations

from bkproto.errors import IncorrectParameterError


class QuorumCoverageSet:
    """Tracks which bookie indices of one ensemble gave a definite answer."""

    __slots__ = ("_ack_quorum", "_ensemble_size", "_known", "_write_quorum")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise IncorrectParameterError(
                f"need E >= Qw >= Qa >= 1, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
            )
        self._ensemble_size = ensemble_size
        self._write_quorum = write_quorum
        self._ack_quorum = ack_quorum
        self._known = [False] * ensemble_size

    def add_known(self, bookie_index: int) -> None:
        """The bookie answered definitely (OK / NoSuchEntry / NoSuchLedger)."""
        self._known[bookie_index] = True

    def is_known(self, bookie_index: int) -> bool:
        return self._known[bookie_index]

    def is_covered(self) -> bool:
        e, w = self._ensemble_size, self._write_quorum
        known = self._known
        for first in range(e):
            unknown = sum(1 for j in range(w) if not known[(first + j) % e])
            if unknown >= self._ack_quorum:
                return False
        return True


def max_missing_reads_allowed(write_quorum: int, ack_quorum: int) -> int:
    """How many replicas of an entry's write set may say "no such entry" while the entry could
    still have been acknowledged (BookKeeper's ``maxMissedReadsAllowed`` for recovery reads)."""
    return write_quorum - ack_quorum


def provably_absent(missing_answers: int, write_quorum: int, ack_quorum: int) -> bool:
    """True when ``missing_answers`` NoSuchEntry/NoSuchLedger replies from an entry's write set
    prove it never reached the ack quorum."""
    return missing_answers > max_missing_reads_allowed(write_quorum, ack_quorum)
