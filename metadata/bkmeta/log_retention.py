"""Retention of a named log: the oldest commits leave the log, and their ledgers are deleted.

A stream appends a commit per micro-batch for as long as it runs, so without retention a log, its
znodes and its ledgers grow without bound (and an overwrite, which replaces every commit in one
transaction, stops fitting ZooKeeper's request limit after some ten thousand commits). As Kafka's
``retention.ms`` and ``retention.bytes`` do, a commit goes once it breaches either limit: older
than ``max_age_s``, or not among the newest ``keep_commits``. Whole commits only: a write's
ledgers stay or go together, so a reader never sees part of a write.

The commits leave the log first (:meth:`LogStore.truncate_batches`), then their ledgers are deleted. A
ledger whose deletion fails is left *untracked* (tagged with the log, in no commit), which
``pybk shell loggc`` deletes later.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bkmeta.ledger_manager import LedgerManager
from bkmeta.named_log import LogCommit, LogStore
from bkproto.errors import BKError, IncorrectParameterError, NoSuchLedgerError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retention:
    """What a log keeps; at least one limit. A commit breaching either one goes."""

    keep_commits: int | None = None  # the newest commits kept (0: none)
    # commits older than this go: a commit's time is ZooKeeper's (its znode's ctime), "now" is
    # the caller's clock, so a skew between the two moves the cut by as much
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        if self.keep_commits is None and self.max_age_s is None:
            raise IncorrectParameterError("retention needs keep_commits or max_age_s (or both)")
        keep = self.keep_commits
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
            raise IncorrectParameterError(f"keep_commits must be an int >= 0, got {self.keep_commits!r}")
        if self.max_age_s is not None and (
            isinstance(self.max_age_s, bool)
            or not isinstance(self.max_age_s, int | float)
            or not self.max_age_s >= 0  # also refuses NaN
        ):
            raise IncorrectParameterError(f"max_age_s must be a number >= 0, got {self.max_age_s!r}")

    def expired(self, commits: Sequence[LogCommit], now_ms: float) -> list[LogCommit]:
        """The commits (in log order) this retention removes: always a prefix of the log."""
        keep_from = 0
        if self.keep_commits is not None:
            keep_from = max(0, len(commits) - self.keep_commits)
        if self.max_age_s is not None:
            cutoff_ms = now_ms - self.max_age_s * 1000.0
            young = next((i for i, c in enumerate(commits) if c.created_ms >= cutoff_ms), len(commits))
            keep_from = max(keep_from, young)
        return list(commits[:keep_from])


@dataclass(frozen=True)
class Truncation:
    removed: tuple[LogCommit, ...]  # commits that left the log
    deleted: tuple[int, ...]  # their ledgers, deleted
    left: tuple[int, ...]  # their ledgers whose deletion failed: untracked, for loggc

    @property
    def entries(self) -> int:
        return sum(seg.entries for c in self.removed for seg in c.segments)


async def apply_retention(
    store: LogStore,
    ledgers: LedgerManager,
    name: str,
    retention: Retention,
    *,
    dry_run: bool = False,
    now_s: float | None = None,
    up_to_seq: int | None = None,
) -> Truncation:
    """Remove the commits ``retention`` expires from log ``name`` and delete their ledgers.
    With ``dry_run``, only say which commits would go. ``up_to_seq`` caps the cut: no commit
    numbered above it goes (the last commit of a plan an operator confirmed: by the time they
    answer, more commits may have aged past the limit, or new ones pushed old ones out)."""
    now_ms = (time.time() if now_s is None else now_s) * 1000.0
    expired = retention.expired(await store.commits(name), now_ms)
    if up_to_seq is not None:
        expired = [c for c in expired if c.seq <= up_to_seq]
    if dry_run or not expired:
        return Truncation(tuple(expired), (), ())
    # Truncate by sequence number, not by the list: a commit made since the read is newer, so
    # it is never removed by a retention decided before it existed. Ledgers are deleted batch by
    # batch, as their commits leave the log: if a later transaction gives up (ZooKeeper gone,
    # or a log too busy), the error comes with every removed commit's ledgers already deleted.
    removed: list[LogCommit] = []
    deleted: list[int] = []
    left: list[int] = []
    async for batch in store.truncate_batches(name, expired[-1].seq + 1):
        removed += batch
        for ledger_id in (seg.ledger_id for c in batch for seg in c.segments):
            if left:
                left.append(ledger_id)
                continue
            try:
                with contextlib.suppress(NoSuchLedgerError):
                    await ledgers.remove_ledger_metadata(ledger_id)
                deleted.append(ledger_id)
            except BKError as e:
                log.warning("log %s: deleting truncated ledger %d failed (loggc deletes the rest): %s",
                            name, ledger_id, e)
                left.append(ledger_id)
    return Truncation(tuple(removed), tuple(deleted), tuple(left))
