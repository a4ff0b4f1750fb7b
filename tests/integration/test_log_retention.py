"""Retention of named logs against a real ZooKeeper and real bookies: the oldest commits leave the
log whole and their ledgers are deleted, commits made meanwhile are never touched, a long log is
truncated in several transactions, and ``pybk shell logtruncate`` does the same for an operator."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster
from tests.support.recover_cluster import pybk_shell

from bkclient import IncorrectParameterError, MetadataVersionError, NoSuchLedgerError
from bkclient.bookkeeper import BookKeeper
from bkclient.named_log import NamedLogs
from bkmeta import named_log
from bkmeta.named_log import LogSegment

__all__ = ["client_cluster"]

pytestmark = pytest.mark.integration


async def commit_writes(logs: NamedLogs, log: str, first: int, count: int, tasks: int = 2) -> list[list[int]]:
    """``count`` writes of ``tasks`` segments each; returns each write's ledger ids."""
    written = []
    for n in range(first, first + count):
        segments = []
        for task in range(tasks):
            writer = await logs.open_segment(log, f"w{n}", task)
            await writer.append(f"{n}/{task}".encode())
            segments.append(await writer.close())
        assert (await logs.commit(log, f"w{n}", segments)).committed
        written.append([s.ledger_id for s in segments])
    return written


async def entries(logs: NamedLogs, log: str) -> list[bytes]:
    return [e.data async for e in logs.read(log)]


async def assert_deleted(bk: BookKeeper, ledger_ids: list[int]) -> None:
    for ledger_id in ledger_ids:
        with pytest.raises(NoSuchLedgerError):
            await bk.ledger_metadata(ledger_id)


async def test_keep_commits_and_max_age_remove_whole_old_writes(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    old = await commit_writes(logs, "events", 0, 5)
    gone = await logs.truncate("events", keep_commits=2)
    assert [c.write_id for c in gone.removed] == ["w0", "w1", "w2"]
    assert sorted(gone.deleted) == sorted(lid for w in old[:3] for lid in w) and gone.left == ()
    assert gone.entries == 6
    await assert_deleted(bk, list(gone.deleted))
    assert await entries(logs, "events") == [b"3/0", b"3/1", b"4/0", b"4/1"]
    assert (await logs.truncate("events", keep_commits=2)).removed == ()  # nothing more to do

    await asyncio.sleep(1.5)
    await commit_writes(logs, "events", 5, 1)
    aged = await logs.truncate("events", max_age_s=1)  # w3 and w4 are older than a second
    assert [c.write_id for c in aged.removed] == ["w3", "w4"]
    assert await entries(logs, "events") == [b"5/0", b"5/1"]
    # Sequence numbers go on from where they were: a truncated log is not a new log.
    await commit_writes(logs, "events", 6, 1)
    assert [c.seq for c in await logs.store.commits("events")] == [5, 6]
    everything = await logs.truncate("events", keep_commits=0)
    assert len(everything.removed) == 2 and await entries(logs, "events") == []
    await assert_deleted(bk, [lid for c in everything.removed for s in c.segments for lid in [s.ledger_id]])

    with pytest.raises(IncorrectParameterError, match="keep_commits or max_age_s"):
        await logs.truncate("events")
    with pytest.raises(IncorrectParameterError, match="keep_commits must be"):
        await logs.truncate("events", keep_commits=-1)
    with pytest.raises(IncorrectParameterError, match="does not exist"):
        await logs.truncate("missing", keep_commits=1)


async def test_a_long_log_is_truncated_in_several_transactions_without_losing_new_commits(
    client_cluster: ClientCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bk = await client_cluster.client()
    store = NamedLogs(bk).store
    await store.ensure("long")
    for n in range(30):  # commits of made-up ledgers: only the znodes matter here
        await store.register_pending("long", 10**9 + n, f"w{n}")
        await store.commit("long", f"w{n}", [LogSegment(10**9 + n, 1, 1, f"w{n}")])
    multis = 0
    real_multi = store._zk.multi

    async def counting_multi(ops: list[tuple[str, str, bytes, int]]) -> None:
        nonlocal multis
        multis += 1
        await real_multi(ops)

    monkeypatch.setattr(store._zk, "multi", counting_multi)
    monkeypatch.setattr(named_log, "MAX_COMMIT_BYTES", 600)  # room for a handful of deletes each

    async def late_commit(n: int) -> None:
        await store.register_pending("long", 10**9 + n, f"w{n}")
        assert (await store.commit("long", f"w{n}", [LogSegment(10**9 + n, 1, 1, f"w{n}")])).committed

    removed, *_ = await asyncio.gather(store.truncate("long", 25), *(late_commit(n) for n in range(30, 34)))
    assert sorted(c.seq for c in removed) == list(range(25))
    assert multis >= 5 + 4  # the truncation took several transactions (plus the 4 commits)
    assert [c.seq for c in await store.commits("long")] == list(range(25, 34))


async def test_a_truncation_whose_reply_was_lost_still_deletes_its_ledgers(
    client_cluster: ClientCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ZooKeeper client retries a call whose reply did not come; the retry of an applied
    truncation then fails on the log version the first try moved. Those commits are gone all
    the same, so their ledgers must be deleted, not left untracked without a word."""
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    zk = logs.store._zk
    written = await commit_writes(logs, "lost", 0, 3, tasks=1)
    real_multi = zk.multi

    async def applied_then_retry_refused(ops: list[tuple[str, str, bytes, int]]) -> None:
        await real_multi(ops)
        if any(kind == "delete" and "/commits/" in path for kind, path, _, _ in ops):
            raise MetadataVersionError("multi set /pybk/logs/lost: znode version changed")

    monkeypatch.setattr(zk, "multi", applied_then_retry_refused)
    gone = await logs.truncate("lost", keep_commits=1)
    monkeypatch.undo()
    assert [c.write_id for c in gone.removed] == ["w0", "w1"]
    assert sorted(gone.deleted) == sorted(written[0] + written[1]) and gone.left == ()
    await assert_deleted(bk, list(gone.deleted))
    assert await entries(logs, "lost") == [b"2/0"]


async def test_a_long_log_is_truncated_while_a_stream_keeps_committing(client_cluster: ClientCluster) -> None:
    """Retention is for long logs that a stream keeps appending to. Each truncation transaction
    holds the log to the version it read; reading every commit record before each one (hundreds
    here) left a stream's commits the time to move that version every time."""
    bk = await client_cluster.client()
    store = NamedLogs(bk).store
    await store.ensure("busy")
    base = 10**9
    await asyncio.gather(*(store.register_pending("busy", base + n, f"w{n}") for n in range(400)))
    for n in range(400):
        await store.commit("busy", f"w{n}", [LogSegment(base + n, 1, 1, f"w{n}")])
    stop = asyncio.Event()
    appended = 0

    async def stream() -> None:
        nonlocal appended
        n = 400
        while not stop.is_set():
            await store.register_pending("busy", base + n, f"w{n}")
            assert (await store.commit("busy", f"w{n}", [LogSegment(base + n, 1, 1, f"w{n}")])).committed
            n += 1
            appended += 1

    appending = asyncio.create_task(stream())
    try:
        await asyncio.sleep(0.2)
        removed = await store.truncate("busy", 390)
    finally:
        stop.set()
        await appending
    assert [c.seq for c in removed] == list(range(390))
    assert appended > 10  # the stream did commit while the truncation ran
    assert [c.seq for c in await store.commits("busy")] == list(range(390, 400 + appended))


async def test_an_overwrite_racing_a_truncation_wins_cleanly(client_cluster: ClientCluster) -> None:
    """Both rewrite the log znode at the version they read, so they take turns: the overwrite is
    never told its write was aborted because the truncation deleted a commit it replaces."""
    bk = await client_cluster.client()
    store = NamedLogs(bk).store
    await store.ensure("race")
    base = 10**9
    for round_ in range(6):
        for n in range(20):
            lid = base + 100 * round_ + n
            await store.register_pending("race", lid, f"w{round_}-{n}")
            await store.commit("race", f"w{round_}-{n}", [LogSegment(lid, 1, 1, f"w{round_}-{n}")])
        before = (await store.commits("race"))[-5].seq
        lid = base + 100 * round_ + 99
        await store.register_pending("race", lid, f"new{round_}")
        new = [LogSegment(lid, 1, 1, f"new{round_}")]
        _, result = await asyncio.gather(
            store.truncate("race", before), store.commit("race", f"new{round_}", new, overwrite=True)
        )
        assert result.committed
        assert [c.write_id for c in await store.commits("race")] == [f"new{round_}"]


async def test_logtruncate_shell_command(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    zk = client_cluster.zk_hosts
    logs = NamedLogs(bk)
    written = await commit_writes(logs, "ops", 0, 3, tasks=1)

    nothing = await asyncio.to_thread(pybk_shell, zk, "logtruncate", "-l", "ops")
    assert nothing.returncode == 2 and "--keep-commits" in nothing.stderr
    dry = await asyncio.to_thread(
        pybk_shell, zk, "logtruncate", "-l", "ops", "--keep-commits", "1", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["found"]["ledger_id"] == [written[0][0], written[1][0]] and plan["removed"] == []
    unasked = await asyncio.to_thread(pybk_shell, zk, "logtruncate", "-l", "ops", "--keep-commits", "1")
    assert unasked.returncode == 2, unasked.stderr
    assert len(await logs.store.commits("ops")) == 3
    done = await asyncio.to_thread(pybk_shell, zk, "logtruncate", "-l", "ops", "--keep-commits", "1", "-f")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["deleted"] == [written[0][0], written[1][0]] and report["left"] == []
    assert await entries(logs, "ops") == [b"2/0"]
    await assert_deleted(bk, [written[0][0], written[1][0]])
    assert (await bk.ledger_metadata(written[2][0])).is_closed
