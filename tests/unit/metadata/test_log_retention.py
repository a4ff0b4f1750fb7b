"""Which commits a retention removes, its argument checks, and what happens to the ledgers of
removed commits when deleting one fails (left untracked for loggc, not retried blindly)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bkmeta.log_retention import Retention, apply_retention
from bkmeta.named_log import LogCommit, LogSegment
from bkproto.errors import (
    IncorrectParameterError,
    MetadataStoreError,
    MetadataVersionError,
    NoSuchLedgerError,
)


def commit(seq: int, created_ms: int, ledgers: tuple[int, ...] = ()) -> LogCommit:
    write = f"w{seq}"
    segments = tuple(LogSegment(lid, 1, 1, write) for lid in ledgers)
    return LogCommit(f"{seq:010d}-{write}", write, segments, created_ms)


LOG = [commit(s, 1000 * s) for s in range(10)]  # commit s made at s seconds


@pytest.mark.parametrize(
    ("retention", "now_s", "removed"),
    [
        (Retention(keep_commits=3), 100, 7),
        (Retention(keep_commits=0), 100, 10),
        (Retention(keep_commits=20), 100, 0),
        (Retention(max_age_s=4), 10, 6),  # made at 0..5 s: more than 4 s before 10 s
        (Retention(max_age_s=0), 9, 9),  # the commit made at "now" stays
        (Retention(max_age_s=1000), 10, 0),
        (Retention(keep_commits=8, max_age_s=4), 10, 6),  # either limit: the stricter wins
        (Retention(keep_commits=2, max_age_s=4), 10, 8),
    ],
)
def test_a_commit_goes_once_it_breaches_either_limit(
    retention: Retention, now_s: float, removed: int
) -> None:
    assert retention.expired(LOG, now_s * 1000.0) == LOG[:removed]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "keep_commits or max_age_s"),
        ({"keep_commits": -1}, "keep_commits must be an int >= 0"),
        ({"keep_commits": 1.5}, "keep_commits must be an int >= 0"),
        ({"keep_commits": True}, "keep_commits must be an int >= 0"),
        ({"max_age_s": -0.1}, "max_age_s must be a number >= 0"),
        ({"max_age_s": float("nan")}, "max_age_s must be a number >= 0"),
        ({"max_age_s": "1h"}, "max_age_s must be a number >= 0"),
    ],
)
def test_bad_retention_is_refused_with_its_name(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(IncorrectParameterError, match=match):
        Retention(**kwargs)


class Store:
    """The two LogStore calls retention makes, over a list of commits: ``per_batch`` commits
    leave per transaction, and the transaction after ``give_up_after`` batches fails."""

    def __init__(
        self, commits: list[LogCommit], per_batch: int = 100, give_up_after: int | None = None
    ) -> None:
        self.log = commits
        self.truncated_before: list[int] = []
        self.per_batch = per_batch
        self.give_up_after = give_up_after

    async def commits(self, name: str) -> list[LogCommit]:
        return list(self.log)

    async def truncate_batches(self, name: str, before_seq: int) -> AsyncIterator[tuple[LogCommit, ...]]:
        self.truncated_before.append(before_seq)
        batches = 0
        while doomed := [c for c in self.log if c.seq < before_seq][: self.per_batch]:
            if batches == self.give_up_after:
                raise MetadataVersionError("log: truncation lost to concurrent commits 30 times in a row")
            self.log = self.log[len(doomed) :]
            batches += 1
            yield tuple(doomed)


class Ledgers:
    def __init__(self, missing: set[int], failing: set[int]) -> None:
        self.missing, self.failing, self.removed = missing, failing, []  # type: ignore[var-annotated]

    async def remove_ledger_metadata(self, ledger_id: int) -> None:
        if ledger_id in self.failing:
            raise MetadataStoreError("ZooKeeper unavailable")
        if ledger_id in self.missing:
            raise NoSuchLedgerError(f"ledger {ledger_id}")
        self.removed.append(ledger_id)


async def test_a_failed_deletion_leaves_the_rest_for_loggc() -> None:
    store = Store([commit(0, 0, (1, 2)), commit(1, 0, (3, 4)), commit(2, 0, (5,)), commit(3, 0, (6,))])
    ledgers = Ledgers(missing={2}, failing={4})
    done = await apply_retention(store, ledgers, "log", Retention(keep_commits=1), now_s=0)  # type: ignore[arg-type]
    assert store.truncated_before == [3]  # by sequence number: a newer commit is never touched
    assert [c.seq for c in done.removed] == [0, 1, 2]
    assert done.deleted == (1, 2, 3)  # 2 was already gone: that is deleted too
    assert done.left == (4, 5) and ledgers.removed == [1, 3]
    assert [c.seq for c in store.log] == [3]


async def test_a_dry_run_removes_nothing() -> None:
    store = Store([commit(0, 0, (1,)), commit(1, 0, (2,))])
    ledgers = Ledgers(set(), set())
    plan = await apply_retention(store, ledgers, "log", Retention(keep_commits=0), dry_run=True)  # type: ignore[arg-type]
    assert [c.seq for c in plan.removed] == [0, 1] and plan.deleted == ()
    assert store.truncated_before == [] and ledgers.removed == []


async def test_a_truncation_that_gives_up_has_deleted_what_it_removed() -> None:
    """A long log goes in several transactions; when a later one fails for good, the commits
    already gone must not leave their ledgers behind untracked."""
    store = Store([commit(n, 0, (10 + n,)) for n in range(5)], per_batch=2, give_up_after=1)
    ledgers = Ledgers(set(), set())
    with pytest.raises(MetadataVersionError):
        await apply_retention(store, ledgers, "log", Retention(keep_commits=0), now_s=0)  # type: ignore[arg-type]
    assert ledgers.removed == [10, 11]  # the first transaction's commits
    assert [c.seq for c in store.log] == [2, 3, 4]


async def test_a_confirmed_plan_caps_the_cut() -> None:
    """What an operator confirmed is all that goes, even if more commits expired meanwhile."""
    store = Store([commit(n, 1000 * n) for n in range(6)])
    retention = Retention(max_age_s=2)
    plan = await apply_retention(store, Ledgers(set(), set()), "log", retention, dry_run=True, now_s=4)  # type: ignore[arg-type]
    assert [c.seq for c in plan.removed] == [0, 1]
    done = await apply_retention(  # two seconds later: commits 2 and 3 have aged out too
        store, Ledgers(set(), set()), "log", retention, now_s=6, up_to_seq=plan.removed[-1].seq  # type: ignore[arg-type]
    )
    assert [c.seq for c in done.removed] == [0, 1] and [c.seq for c in store.log] == [2, 3, 4, 5]
