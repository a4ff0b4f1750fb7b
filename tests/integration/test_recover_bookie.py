"""``pybk shell recover``: a bookie is killed for good and its data copied to the others, on real
bookie processes and a real ZooKeeper. Three ledgers name it: a closed one, an open one whose
writer already moved on (it keeps writing through the recovery), and an open one whose writer is
gone (it is fenced and closed). Afterwards no metadata names the dead bookie and every replica
each entry's write set names really holds it (read from each bookie directly)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from tests.support.bookies import BookieFactory, BookieStartError
from tests.support.recover_cluster import (
    FAST_EXPIRY,
    PASSWORD,
    ledger_on,
    new_cluster,
    pybk_shell,
    replicas_hold_every_entry,
)

from bkclient import BookKeeper, DigestType, LedgerState
from bkmeta.metadata_client import MetadataClient

pytestmark = pytest.mark.integration


async def test_a_dead_bookie_is_re_replicated_and_writers_carry_on(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 4)
    addresses = {b.bookie_id: b.address for b in bookies}
    victim = bookies[0]
    data = {name: [os.urandom(300) for _ in range(60)] for name in ("closed", "moved", "orphan")}
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 4, 30.0)
        closed = await ledger_on(bk, victim.bookie_id)
        moved = await ledger_on(bk, victim.bookie_id)
        for payload in data["closed"]:
            await closed.append(payload)
        await closed.close()
        for payload in data["moved"][:30]:
            await moved.append(payload)
        async with await BookKeeper.connect(zk_hosts) as gone:  # a writer that dies: never closes
            orphan = await ledger_on(gone, victim.bookie_id)
            for payload in data["orphan"]:
                await orphan.append(payload)

        await asyncio.to_thread(victim.kill9)
        for payload in data["moved"][30:45]:  # the writer replaces the dead bookie itself
            await moved.append(payload)
        assert moved.ensemble_changes == 1 and victim.bookie_id not in moved.ensemble

        plan = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "--dry-run")
        assert plan.returncode == 0, plan.stderr
        planned = {r["ledger_id"]: r for r in json.loads(plan.stdout)["ledgers"]}
        assert set(planned) == {closed.ledger_id, moved.ledger_id, orphan.ledger_id}
        assert planned[orphan.ledger_id]["fenced"] and not planned[moved.ledger_id]["fenced"]
        # the orphan's last segment ends where recovery will close it; the closed one's is known
        assert planned[orphan.ledger_id]["fragments"][-1]["last_entry_id"] is None
        assert planned[closed.ledger_id]["fragments"][-1]["last_entry_id"] == 59
        assert (await bk.ledger_metadata(orphan.ledger_id)).state == LedgerState.OPEN  # untouched

        done = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "-f")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["failed"] == [] and report["entries_copied"] > 0

        for payload in data["moved"][45:]:  # its metadata changed under it: the writer carries on
            await moved.append(payload)
        await moved.close()
        for name, handle in (("closed", closed), ("moved", moved), ("orphan", orphan)):
            md = await bk.ledger_metadata(handle.ledger_id)
            assert md.is_closed and victim.bookie_id not in md.all_bookies(), (name, md.segments)
            reader = await bk.open_ledger(handle.ledger_id, PASSWORD, recovery=False)
            assert [e.data async for e in reader.read(0, md.last_entry_id)] == data[name], name
            await asyncio.to_thread(replicas_hold_every_entry, md, handle.ledger_id, addresses)

        again = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "-f")
        assert again.returncode == 0 and json.loads(again.stdout)["ledgers"] == []  # nothing left


async def test_recover_refuses_without_confirmation_and_reports_what_it_cannot_do(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        ledger = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
        for i in range(10):
            await ledger.append(b"entry %d" % i)
        await ledger.close()
    victim = bookies[1]
    await asyncio.to_thread(victim.kill9)
    unconfirmed = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id)
    assert unconfirmed.returncode == 2 and "pass -f" in unconfirmed.stderr
    bad = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", "nohost", "-f")
    assert bad.returncode == 2 and "is not host:port" in bad.stderr
    # two live bookies, both already in the ensemble: nowhere to copy to
    stuck = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "-f")
    assert stuck.returncode == 1
    (report,) = json.loads(stuck.stdout)["ledgers"]
    assert report["ledger_id"] == ledger.ledger_id and "NotEnoughBookies" in report["error"]
    assert report["fragments"][0]["new"] is None
    text = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "-f", as_json=False)
    assert text.returncode == 1
    assert f"ledger {ledger.ledger_id}: 0 entries copied" in text.stdout
    assert "entries 0..9: [" in text.stdout and "-> [no bookie available]" in text.stdout
    assert "FAILED: NotEnoughBookiesError" in text.stdout and "1 failed" in text.stdout


async def test_decommissioning_a_stopped_bookie_moves_its_data_and_retires_its_id(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 4)
    async with await MetadataClient.connect(zk_hosts) as meta:
        addresses = {b.bookie_id: b.address for b in bookies}
        retired = bookies[0]
        async with await BookKeeper.connect(zk_hosts) as bk:
            await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 4, 30.0)
            ledger = await ledger_on(bk, retired.bookie_id)
            data = [os.urandom(100) for _ in range(30)]
            for payload in data:
                await ledger.append(payload)
            await ledger.close()

            running = await asyncio.to_thread(
                pybk_shell, zk_hosts, "decommissionbookie", "--bookieid", retired.bookie_id, "-f"
            )
            assert running.returncode == 1 and "still registered: stop it" in running.stderr
            assert await meta.zk.exists(meta.layout.cookie(retired.bookie_id)) is not None

            await asyncio.to_thread(retired.stop)
            done = await asyncio.to_thread(
                pybk_shell, zk_hosts, "decommissionbookie", "--bookieid", retired.bookie_id, "-f"
            )
            assert done.returncode == 0, done.stdout + done.stderr
            report = json.loads(done.stdout)
            assert report["decommissioned"] and report["entries_copied"] > 0
            md = await bk.ledger_metadata(ledger.ledger_id)
            assert retired.bookie_id not in md.all_bookies()
            reader = await bk.open_ledger(ledger.ledger_id, PASSWORD, recovery=False)
            assert [e.data async for e in reader.read(0, md.last_entry_id)] == data
            await asyncio.to_thread(replicas_hold_every_entry, md, ledger.ledger_id, addresses)
        assert await meta.zk.exists(meta.layout.cookie(retired.bookie_id)) is None
    # its old directories cannot rejoin: their cookie no longer matches the cluster's
    with pytest.raises(BookieStartError, match=r"hold a cookie but \S+ does not exist"):
        await asyncio.to_thread(retired.start)


async def test_listunderreplicated_and_friends_name_what_a_lost_bookie_leaves_short(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 4, FAST_EXPIRY)
    victim, other = bookies[0], bookies[1]
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 4, 30.0)
        short = [await ledger_on(bk, victim.bookie_id) for _ in range(2)]
        spared = await bk.create_ledger(2, 2, 2, DigestType.CRC32C, PASSWORD)
        while victim.bookie_id in spared.ensemble:  # one the lost bookie holds nothing of
            await spared.close()
            await bk.delete_ledger(spared.ledger_id)  # it would name the lost bookie too
            spared = await bk.create_ledger(2, 2, 2, DigestType.CRC32C, PASSWORD)
        for handle in (*short, spared):
            await handle.append(b"one entry")
            await handle.close()
        expected = sorted(h.ledger_id for h in short)

        healthy = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated")
        assert json.loads(healthy.stdout) == {"count": 0, "ledgers": []}
        disks = json.loads((await asyncio.to_thread(pybk_shell, zk_hosts, "bookieinfo")).stdout)
        assert sorted(b["bookie_id"] for b in disks["bookies"]) == sorted(b.bookie_id for b in bookies)
        assert all(0 < b["free_bytes"] <= b["total_bytes"] for b in disks["bookies"])
        assert disks["total_bytes"] == sum(b["total_bytes"] for b in disks["bookies"])
        await asyncio.to_thread(victim.kill9)
        await bk.ctx.bookie_watcher.wait_for(lambda w: victim.bookie_id not in w.all_bookies(), 30.0)

        listed = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["ledgers"] == [
            {"ledger_id": i, "missing_replicas": [victim.bookie_id]} for i in expected
        ]
        text = await asyncio.to_thread(
            pybk_shell, zk_hosts, "listunderreplicated", "--printmissingreplica", as_json=False
        )
        assert text.stdout.splitlines() == [f"{i}\tmissing {victim.bookie_id}" for i in expected]
        on_victim = await asyncio.to_thread(
            pybk_shell, zk_hosts, "listledgers", "--bookieid", victim.bookie_id
        )
        assert json.loads(on_victim.stdout)["ledgers"] == expected
        info = json.loads((await asyncio.to_thread(pybk_shell, zk_hosts, "clusterinfo")).stdout)
        assert info == {"auditorElected": False, "auditorId": "", "clusterUnderReplicated": True,
                        "ledgerReplicationEnabled": True, "totalBookiesCount": 4, "writableBookiesCount": 3,
                        "readonlyBookiesCount": 0, "unavailableBookiesCount": 1}
        count = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated", "-c", as_json=False)
        assert count.stdout.strip() == "2"
        for flag, bookie_id, shown in (("--missingreplica", other.bookie_id, 0),
                                       ("--excludingmissingreplica", victim.bookie_id, 0),
                                       ("--excludingmissingreplica", other.bookie_id, 2)):
            filtered = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated", flag, bookie_id)
            assert json.loads(filtered.stdout)["count"] == shown, (flag, bookie_id)
        bad = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated", "--missingreplica", "x")
        assert bad.returncode == 2 and "is not host:port" in bad.stderr

        done = await asyncio.to_thread(pybk_shell, zk_hosts, "recover", victim.bookie_id, "-f")
        assert done.returncode == 0, done.stdout + done.stderr
        after = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated")
        assert json.loads(after.stdout)["count"] == 0
        info = json.loads((await asyncio.to_thread(pybk_shell, zk_hosts, "clusterinfo")).stdout)
        assert not info["clusterUnderReplicated"]
        gone = await asyncio.to_thread(pybk_shell, zk_hosts, "listledgers", "--bookieid", victim.bookie_id)
        assert json.loads(gone.stdout)["ledgers"] == []
