"""Named logs against a real ZooKeeper and real bookies: the commit protocol the Spark sink uses
(concurrent commits, idempotent versions, the sweep of a write's uncommitted ledgers, abort,
overwrite) driven through the blocking client, as a Spark task or driver would."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster
from tests.support.recover_cluster import pybk_shell

from bkclient import (
    IllegalOpError,
    IncorrectParameterError,
    LedgerFencedError,
    MetadataStoreError,
    NoSuchLedgerError,
)
from bkclient import sync as bksync
from bkclient.named_log import NamedLogs, SegmentOptions
from bkclient.spark_sink import SinkOptions, abort_write, commit_write, new_write_id, write_partition
from bkmeta.log_gc import UNTRACKED, find_garbage, remove_garbage
from bkmeta.named_log import LOG_NAME_KEY, LogSegment

__all__ = ["client_cluster"]

pytestmark = pytest.mark.integration


def values(task: int, count: int) -> list[bytes]:
    return [f"{task}:{i}:".encode() + os.urandom(16) for i in range(count)]


def ledgers_of_log(bk: bksync.BookKeeper, log: str) -> set[int]:
    """Every ledger tagged as this log's, committed or not."""
    return {
        lid for lid in bk.list_ledgers()
        if bk.ledger_metadata(lid).custom_metadata.get(LOG_NAME_KEY) == f"/pybk/logs/{log}".encode()
    }


async def test_write_commit_read_in_task_order_and_sweep_failed_attempts(
    client_cluster: ClientCluster,
) -> None:
    await client_cluster.client()  # waits until the bookies are registered
    opts = SinkOptions.parse({"zkServers": client_cluster.zk_hosts, "log": "events"})

    def job() -> None:
        write_id = new_write_id()
        written = {t: values(t, 50 + t) for t in range(3)}
        segments = [write_partition(opts, write_id, t, written[t]) for t in (2, 0, 1)]
        assert write_partition(opts, write_id, 3, []) is None  # an empty task makes no ledger
        with bksync.BookKeeper(client_cluster.zk_hosts) as bk:
            logs = bk.logs()
            # A task attempt that died after writing: registered, never committed.
            dead = logs.open_segment("events", write_id, 0)
            dead.append(b"from an attempt that died")
            # Nothing is visible before the commit.
            assert logs.segments("events") == []
            result = commit_write(opts, write_id, [segments[1], segments[2], segments[0], None])
            assert result.committed
            got = logs.segments("events")
            assert [s.task for s in got] == [0, 1, 2]
            assert [s.entries for s in got] == [50, 51, 52]
            assert [e.data for e in logs.read("events")] == written[0] + written[1] + written[2]
            in_lists = list(logs.read_segment_batches(got[1], first=3, last=40))
            assert [e.data for entries in in_lists for e in entries] == written[1][3:41]
            for seg in got:
                md = bk.ledger_metadata(seg.ledger_id)
                assert md.is_closed and md.last_entry_id == seg.entries - 1 and md.length == seg.length
            # The dead attempt's ledger was deleted by the commit, and nothing is left pending.
            with pytest.raises(NoSuchLedgerError):
                bk.ledger_metadata(dead.ledger_id)
            assert logs.pending("events") == {}
            assert ledgers_of_log(bk, "events") == {s.ledger_id for s in got}

    await asyncio.to_thread(job)


async def test_txn_version_commits_once(client_cluster: ClientCluster) -> None:
    await client_cluster.client()
    opts = SinkOptions.parse({"zkServers": client_cluster.zk_hosts, "log": "ingest",
                              "txnAppId": "app-1", "txnVersion": "7"})

    def job() -> None:
        first = new_write_id()
        seg = write_partition(opts, first, 0, [b"a", b"b"])
        assert commit_write(opts, first, [seg]).committed
        # The same micro-batch replayed (or an older one): refused, and its ledger deleted.
        for version in (7, 3):
            again = new_write_id()
            dup = write_partition(opts, again, 0, [b"a", b"b"])
            assert dup is not None
            result = commit_write(opts, again, [dup], txn=("app-1", version))
            assert not result.committed
            with bksync.BookKeeper(client_cluster.zk_hosts) as bk, pytest.raises(NoSuchLedgerError):
                bk.ledger_metadata(dup.ledger_id)
        # Another app, or the next version, goes in.
        third = new_write_id()
        seg3 = write_partition(opts, third, 0, [b"c"])
        assert commit_write(opts, third, [seg3], txn=("app-1", 8)).committed
        fourth = new_write_id()
        seg4 = write_partition(opts, fourth, 0, [b"d"])
        assert commit_write(opts, fourth, [seg4], txn=("app-2", 0)).committed
        with bksync.BookKeeper(client_cluster.zk_hosts) as bk:
            assert [e.data for e in bk.logs().read("ingest")] == [b"a", b"b", b"c", b"d"]

    await asyncio.to_thread(job)


async def test_abort_and_overwrite_delete_ledgers(client_cluster: ClientCluster) -> None:
    await client_cluster.client()
    opts = SinkOptions.parse({"zkServers": client_cluster.zk_hosts, "log": "table"})

    def job() -> None:
        old_id = new_write_id()
        old = [write_partition(opts, old_id, t, values(t, 10)) for t in range(2)]
        commit_write(opts, old_id, old)
        # An aborted write: one finished task, one still registered; both ledgers go.
        gone_id = new_write_id()
        finished = write_partition(opts, gone_id, 0, values(0, 5))
        with bksync.BookKeeper(client_cluster.zk_hosts) as bk:
            stray = bk.logs().open_segment("table", gone_id, 1)
            stray.append(b"x")
        abort_write(opts, gone_id)
        assert finished is not None
        with bksync.BookKeeper(client_cluster.zk_hosts) as bk, pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(finished.ledger_id)
        # Committing an aborted write is refused, saying so.
        with pytest.raises(IllegalOpError, match="was aborted; nothing was committed"):
            commit_write(opts, gone_id, [finished])
        new_id = new_write_id()
        new = [write_partition(opts, new_id, 0, [b"only"])]
        result = commit_write(opts, new_id, new, overwrite=True)
        assert {s.ledger_id for s in result.replaced} == {s.ledger_id for s in old if s}
        with bksync.BookKeeper(client_cluster.zk_hosts) as bk:
            assert [e.data for e in bk.logs().read("table")] == [b"only"]
            assert ledgers_of_log(bk, "table") == {s.ledger_id for s in new if s}

    await asyncio.to_thread(job)


async def test_a_task_that_opens_its_ledger_after_the_abort_fails_and_leaves_nothing(
    client_cluster: ClientCluster,
) -> None:
    """Issue 30: a failed job's slow task created its ledger after the driver's abort had swept
    the write, and the ledger stayed pending for ever. Here the driver aborts first and the task
    opens its segment afterwards, with the job's write id, on a log the job never made."""
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    opts = SinkOptions.parse({"zkServers": zk, "log": "late"})

    def job() -> str:
        write_id = new_write_id()
        abort_write(opts, write_id)  # the job failed before any task had opened its ledger
        with pytest.raises(IllegalOpError, match=f"write '{write_id}' was aborted; ledger \\d+ is not kept"):
            write_partition(opts, write_id, 1, values(1, 20))
        with bksync.BookKeeper(zk) as bk:
            assert ledgers_of_log(bk, "late") == set()
            assert bk.logs().pending("late") == {}
        # The same after a task had finished (its segment in the driver's hands) and the
        # abort swept it: a later task still fails, and the write cannot be committed.
        second = new_write_id()
        finished = write_partition(opts, second, 0, values(0, 5))
        abort_write(opts, second)
        with pytest.raises(IllegalOpError, match="was aborted"):
            write_partition(opts, second, 1, values(1, 5))
        with pytest.raises(IllegalOpError, match="was aborted; nothing was committed"):
            commit_write(opts, second, [finished])
        with bksync.BookKeeper(zk) as bk:
            assert ledgers_of_log(bk, "late") == set()
            assert bk.logs().pending("late") == {} and bk.logs().segments("late") == []
        return write_id

    first = await asyncio.to_thread(job)
    # The markers stay until loggc finds them old enough (6 h by default) with nothing pending.
    young = json.loads((await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "late", "-f")).stdout)
    assert young["found"]["aborted_write"] == [] and young["markers_deleted"] == []
    done = await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "late", "--min-age-s", "0", "-f")
    assert done.returncode == 0, done.stderr
    assert first in json.loads(done.stdout)["markers_deleted"]
    assert await NamedLogs(await client_cluster.client()).store.aborted_writes("late") == {}


async def test_a_task_still_writing_when_its_write_is_aborted_cannot_finish(
    client_cluster: ClientCluster,
) -> None:
    """The other order: the task registered before the abort, which deletes its ledger under
    it. The task's close then fails, and nothing of the write remains or can be committed."""
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    writer = await logs.open_segment("midway", "w1", 0)
    await writer.append(b"before the abort")
    await logs.abort("midway", "w1")
    await writer.append(b"after it")  # bookies still take adds; the ledger's metadata is gone
    with pytest.raises(NoSuchLedgerError):
        await writer.close()
    assert await logs.pending("midway") == {} and await bk.list_ledgers() == []
    segment = LogSegment(writer.ledger_id, 2, 24, "w1")
    with pytest.raises(IllegalOpError, match="was aborted; nothing was committed"):
        await logs.commit("midway", "w1", [segment])
    assert await logs.segments("midway") == []


async def test_a_stream_batch_replayed_after_its_abort_commits(client_cluster: ClientCluster) -> None:
    """A stream's write id is its batch id, which the replay after an abort uses again: that
    abort leaves no marker, and the replay's commit sweeps a ledger of the aborted attempt
    that was registered after the abort (the late task the marker stops in batch writes)."""
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    opts = SinkOptions.parse({"zkServers": zk, "log": "stream"})

    def job() -> None:
        batch = "app-7"
        gone = write_partition(opts, batch, 0, values(0, 5))
        abort_write(opts, batch, reusable=True)
        late = write_partition(opts, batch, 1, values(1, 5))  # the aborted attempt's slow task
        replay = write_partition(opts, batch, 0, [b"replayed"])
        assert commit_write(opts, batch, [replay], txn=("app", 7)).committed
        assert gone is not None and late is not None and replay is not None
        with bksync.BookKeeper(zk) as bk:
            assert [e.data for e in bk.logs().read("stream")] == [b"replayed"]
            assert bk.logs().pending("stream") == {}
            assert ledgers_of_log(bk, "stream") == {replay.ledger_id}

    await asyncio.to_thread(job)


async def test_concurrent_commits_all_land_in_distinct_slots(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    options = SegmentOptions(ensemble=3, write_quorum=2, ack_quorum=2)

    async def one_write(n: int) -> int:
        write_id = f"w{n}"
        writer = await logs.open_segment("shared", write_id, 0, options)
        await writer.append(f"write {n}".encode())
        seg = await writer.close()
        assert (await logs.commit("shared", write_id, [seg])).committed
        return seg.ledger_id

    ledger_ids = await asyncio.gather(*(one_write(n) for n in range(8)))
    segments = await logs.segments("shared")
    assert sorted(s.ledger_id for s in segments) == sorted(ledger_ids)
    written = sorted(f"write {n}".encode() for n in range(8))
    assert sorted([e.data async for e in logs.read("shared")]) == written


async def test_bad_names_and_options_are_refused(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    for name in ("", "a/b", "../x", "x" * 201):
        with pytest.raises(IncorrectParameterError, match="log name"):
            await logs.open_segment(name, "w", 0)
    with pytest.raises(IncorrectParameterError, match="does not exist"):
        await logs.segments("never-written")
    with pytest.raises(IncorrectParameterError, match="ensemble >= write quorum"):
        SegmentOptions(ensemble=2, write_quorum=3, ack_quorum=2)
    assert await bk.list_ledgers() == []  # nothing was created by the refusals


async def test_a_failed_add_fails_the_task_and_its_ledger_goes(client_cluster: ClientCluster) -> None:
    await client_cluster.client()
    opts = SinkOptions.parse({"zkServers": client_cluster.zk_hosts, "log": "fenced"})

    def job() -> None:
        with bksync.BookKeeper(client_cluster.zk_hosts) as other:

            def values_then_fence() -> Iterator[bytes]:
                for i in range(3000):
                    if i == 2000:  # another client recovers the ledger under the writer
                        (ledger_id,) = other.logs().pending("fenced")
                        other.open_ledger(ledger_id, recovery=True).close()
                    yield b"%d" % i

            with pytest.raises(LedgerFencedError):
                write_partition(opts, new_write_id(), 0, values_then_fence())
            assert other.logs().pending("fenced") == {}
            assert ledgers_of_log(other, "fenced") == set()

    await asyncio.to_thread(job)


async def test_a_commit_is_never_applied_twice_nor_undone_by_an_abort(
    client_cluster: ClientCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bk = await client_cluster.client()
    logs = NamedLogs(bk)
    zk = logs.store._zk
    real_multi = zk.multi

    async def applied_then_reply_lost(ops: list[tuple[str, str, bytes, int]]) -> None:
        await real_multi(ops)
        raise MetadataStoreError("multi: ZooKeeper unavailable after 4 attempts (ConnectionLoss)")

    async def write(write_id: str, data: bytes) -> LogSegment:
        writer = await logs.open_segment("once", write_id, 0)
        await writer.append(data)
        return await writer.close()

    async def zookeeper_gone(*_args: object) -> None:
        raise MetadataStoreError("delete: ZooKeeper unavailable after 4 attempts (ConnectionLoss)")

    first = await write("w1", b"one")
    # The commit lands, its reply is lost, and the clean-up after it fails too.
    monkeypatch.setattr(zk, "multi", applied_then_reply_lost)
    monkeypatch.setattr(logs.store, "pending", zookeeper_gone)
    result = await logs.commit("once", "w1", [first], txn=("app", 1))
    monkeypatch.undo()
    assert result.committed and result.segments == (first,)
    # The caller, unsure, commits again: still once. Then Spark's abort (a later step failed):
    # the committed ledger stays, since the log names it.
    again = await logs.commit("once", "w1", [first], txn=("app", 1))
    assert again.committed
    await logs.abort("once", "w1")
    assert [e.data async for e in logs.read("once")] == [b"one"]
    assert await logs.pending("once") == {}
    second = await write("w2", b"two")
    assert (await logs.commit("once", "w2", [second], txn=("app", 2))).committed
    assert [e.data async for e in logs.read("once")] == [b"one", b"two"]


async def test_a_commit_too_big_for_zookeeper_is_refused_with_its_size(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    store = NamedLogs(bk).store
    await store.ensure("big")
    many = [LogSegment(10**12 + i, 10**6, 10**9, "w", i) for i in range(20_000)]
    with pytest.raises(IncorrectParameterError, match=r"a commit of 20000 segments takes \d+ bytes"):
        await store.commit("big", "w", many)
    assert await store.segments("big") == []


async def test_listlogs_and_loggc_remove_only_orphans(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    zk = client_cluster.zk_hosts
    logs = NamedLogs(bk)
    kept = await logs.open_segment("app", "good", 0)
    for i in range(5):
        await kept.append(b"%d" % i)
    assert (await logs.commit("app", "good", [await kept.close()])).committed
    # A write whose driver died before its commit, and a ledger made but never registered.
    dead = await logs.open_segment("app", "dead", 0)
    await dead.append(b"never committed")
    dead_segment = await dead.close()
    untracked = await bk.create_ledger(3, 2, 2, custom_metadata={LOG_NAME_KEY: b"/pybk/logs/app"})
    await untracked.close()
    # The same name under another logs root is another log: never this one's garbage.
    other_log = await bk.create_ledger(3, 2, 2, custom_metadata={LOG_NAME_KEY: b"/staging/logs/app"})
    await other_log.close()

    listed = json.loads((await asyncio.to_thread(pybk_shell, zk, "listlogs", "-l", "app")).stdout)["logs"]
    assert listed[0]["entries"] == 5 and listed[0]["pending_ledgers"] == [dead.ledger_id]
    assert [s["ledger_id"] for s in listed[0]["segment_list"]] == [kept.ledger_id]

    young = await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "app", "-f")  # 6 h by default
    assert young.returncode == 0 and json.loads(young.stdout)["found"]["ledger_id"] == []
    dry = json.loads((await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "app", "--min-age-s", "0",
                                             "--dry-run")).stdout)
    assert dry["found"]["ledger_id"] == sorted([dead.ledger_id, untracked.ledger_id]) and dry["deleted"] == []
    unasked = await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "app", "--min-age-s", "0")
    assert unasked.returncode == 2, unasked.stderr
    done = await asyncio.to_thread(pybk_shell, zk, "loggc", "-l", "app", "--min-age-s", "0", "-f")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted"] == sorted([dead.ledger_id, untracked.ledger_id])

    assert sorted(await bk.list_ledgers()) == sorted([kept.ledger_id, other_log.ledger_id])
    assert [e.data async for e in logs.read("app")] == [b"%d" % i for i in range(5)]
    with pytest.raises(IncorrectParameterError, match="no longer pending"):
        await logs.commit("app", "dead", [dead_segment])  # the late driver is refused


async def test_loggc_keeps_a_ledger_committed_after_it_was_found(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    store = NamedLogs(bk).store
    await store.ensure("race")
    # A writer between creating its ledger and registering it: untracked, for now.
    handle = await bk.create_ledger(3, 2, 2, custom_metadata={LOG_NAME_KEY: store.path("race").encode()})
    await handle.append(b"late but committed")
    await handle.close()
    found = await find_garbage(store, bk.ctx.metadata.ledger_manager, "race", min_age_s=0)
    assert [(g.ledger_id, g.kind) for g in found] == [(handle.ledger_id, UNTRACKED)]
    await store.register_pending("race", handle.ledger_id, "late")
    assert (await store.commit("race", "late", [LogSegment(handle.ledger_id, 1, 18, "late")])).committed
    assert await remove_garbage(store, bk.ctx.metadata.ledger_manager, "race", found) == []
    assert [e.data async for e in NamedLogs(bk).read("race")] == [b"late but committed"]
