"""Automatic re-replication of lost bookies' data (BookKeeper's AutoRecovery), run by
``pybk autorecovery``: a leader-elected loop over :class:`bkclient.BookKeeperAdmin`."""

from __future__ import annotations

from .leader import LeaderElection
from .service import AutoRecovery
from .stats import AutoRecoveryStats

__all__ = ["AutoRecovery", "AutoRecoveryStats", "LeaderElection"]
