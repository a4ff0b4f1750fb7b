"""``pybk autorecovery`` on real bookie processes and a real ZooKeeper: a bookie killed for good
has its data re-replicated without an operator, an idle open ledger on it is fenced once its
writer's grace is over, and only one of several autorecovery processes leads."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.autorecovery import service_metrics, until_logged, watched_cluster
from tests.support.bookies import BookieFactory
from tests.support.recover_cluster import (
    PASSWORD,
    ledger_on,
    new_cluster,
    replicas_hold_every_entry,
)

from autorecovery import LeaderElection
from bkclient import BookKeeper, BookKeeperAdmin, LedgerFencedError
from bkmeta.zk import SessionEvent, ZkClient

pytestmark = pytest.mark.integration


async def test_a_lost_bookie_is_re_replicated_without_an_operator(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    log_path = tmp_path / "autorecovery.log"
    async with watched_cluster(zk_hosts, bookie_factory, log_path, openLedgerRereplicationGracePeriod="2000",
                               auditorPeriodicBookieCheckInterval="0") as (bookies, bk, service):
        addresses = {b.bookie_id: b.address for b in bookies}
        victim = bookies[0]
        closed = await ledger_on(bk, victim.bookie_id)
        data = [os.urandom(200) for _ in range(50)]
        for payload in data:
            await closed.append(payload)
        await closed.close()
        idle = await ledger_on(bk, victim.bookie_id)  # open, and its writer adds nothing more
        for payload in data[:20]:
            await idle.append(payload)

        await asyncio.to_thread(victim.kill9)
        async with asyncio.timeout(60):
            while True:
                mds = [await bk.ledger_metadata(h.ledger_id) for h in (closed, idle)]
                if all(victim.bookie_id not in md.all_bookies() for md in mds):
                    break
                await asyncio.sleep(0.5)
        closed_md, idle_md = mds
        assert idle_md.is_closed and idle_md.last_entry_id == 19  # fenced and closed at its end
        with pytest.raises(LedgerFencedError):
            await idle.append(b"too late")
        expected_data = ((closed_md, closed.ledger_id, data), (idle_md, idle.ledger_id, data[:20]))
        for md, ledger_id, expected in expected_data:
            reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
            assert [e.data async for e in reader.read(0, md.last_entry_id)] == expected
            await asyncio.to_thread(replicas_hold_every_entry, md, ledger_id, addresses)
        metrics = await asyncio.to_thread(service_metrics, log_path)
        assert metrics["autorecovery_leader"] == 1.0
        assert metrics["autorecovery_ledgers_rereplicated_total"] == 2
        assert metrics["autorecovery_ledger_failures_total"] == 0
        assert metrics["autorecovery_entries_copied_total"] > 0
    log = log_path.read_text()
    assert service.returncode == 0, log
    assert "leading autorecovery" in log and "bookies lost: " + victim.bookie_id in log


async def test_a_bookie_back_within_the_delay_is_left_alone(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    log_path = tmp_path / "autorecovery.log"
    async with watched_cluster(zk_hosts, bookie_factory, log_path, lostBookieRecoveryDelay="3600") as (
        bookies, bk, _,
    ):
        victim = bookies[0]
        ledger = await ledger_on(bk, victim.bookie_id)
        await ledger.append(b"kept where it is")
        await ledger.close()
        await asyncio.to_thread(victim.kill9)
        await bk.ctx.bookie_watcher.wait_for(lambda w: victim.bookie_id not in w.all_bookies(), 30.0)
        await until_logged(log_path, "is gone")  # the leader saw it go
        await asyncio.to_thread(victim.start)  # back well within the delay
        await bk.ctx.bookie_watcher.wait_for(lambda w: victim.bookie_id in w.all_bookies(), 30.0)
        await until_logged(log_path, "is back")
        assert victim.bookie_id in (await bk.ledger_metadata(ledger.ledger_id)).all_bookies()
    assert "re-replicating their ledgers" not in log_path.read_text()


LEADER = "/ledgers/underreplication/auditorelection/leader"
Candidates = tuple[ZkClient, ZkClient, LeaderElection, LeaderElection, "asyncio.Task[None]"]


@contextlib.asynccontextmanager
async def _first_leads_second_waits(zk_hosts: str) -> AsyncIterator[Candidates]:
    async with ZkClient.for_hosts(zk_hosts) as zk_a, ZkClient.for_hosts(zk_hosts) as zk_b:
        first, second = LeaderElection(zk_a, LEADER, "a"), LeaderElection(zk_b, LEADER, "b")
        await first.start()
        await second.start()
        await asyncio.wait_for(first.lead(), 10)
        waiting = asyncio.create_task(second.lead())
        await asyncio.sleep(0.3)
        assert first.is_leader and not second.is_leader and not waiting.done()
        yield zk_a, zk_b, first, second, waiting


async def test_one_leader_at_a_time(zk_hosts: str) -> None:
    async with _first_leads_second_waits(zk_hosts) as (zk_a, zk_b, first, second, waiting):
        assert (await zk_a.get(LEADER))[0] == b"a"
        await first.close()  # steps down: the other takes over at once
        await asyncio.wait_for(waiting, 10)
        assert second.is_leader and not first.is_leader
        assert (await zk_b.get(LEADER))[0] == b"b"
        await second.close()
        assert await zk_a.exists(LEADER) is None


async def test_a_leader_whose_znode_is_deleted_steps_down_and_never_deletes_a_successors(
    zk_hosts: str,
) -> None:
    async with _first_leads_second_waits(zk_hosts) as (_, zk_b, first, second, waiting):
        await zk_b.delete(LEADER)  # say, an operator's mistake
        await asyncio.wait_for(first.lost(), 10)
        await asyncio.wait_for(waiting, 10)
        assert second.is_leader and not first.is_leader
        await first.close()  # must not take the successor's znode with it
        assert (await zk_b.get(LEADER))[0] == b"b"
        await second.close()


async def test_a_disconnected_leader_steps_down_then_leads_again_with_its_session(zk_hosts: str) -> None:
    async with ZkClient.for_hosts(zk_hosts) as zk:
        election = LeaderElection(zk, LEADER, "a")
        await election.start()
        await asyncio.wait_for(election.lead(), 10)
        election._on_session(SessionEvent.DISCONNECTED)  # what ZkClient reports on a connection loss
        await asyncio.wait_for(election.lost(), 1)
        assert not election.is_leader
        await asyncio.wait_for(election.lead(), 10)  # the znode is still this session's
        assert election.is_leader
        await election.close()


async def test_a_bookie_the_watcher_has_not_seen_yet_is_not_lost(
    zk_hosts: str, bookie_factory: BookieFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    await new_cluster(zk_hosts, bookie_factory, 3)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        ledger = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        await ledger.close()
        meta = bk.ctx.metadata  # and a ledger znode nobody can decode: skipped, not fatal
        await meta.zk.create(meta.layout.ledger(ledger.ledger_id + 1000), b"not metadata", makepath=True)
        admin = BookKeeperAdmin(bk)
        # a stale view (a registration it has not caught up with, or a move between available/
        # and readonly/ half seen): ZooKeeper itself says every bookie is there
        monkeypatch.setattr(bk.ctx.bookie_watcher, "all_bookies", dict)
        named = await admin.ledgers_by_bookie()
        assert named == {b: {ledger.ledger_id} for b in ledger.ensemble}
        assert await admin.unregistered(named) == set()
        assert await admin.underreplicated_ledgers() == {}
