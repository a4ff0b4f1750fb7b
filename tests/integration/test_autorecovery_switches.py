"""The operator's autorecovery switches: ``pybk shell autorecovery`` and ``lostbookierecoverydelay``
write BookKeeper's znodes, and a running ``pybk autorecovery`` obeys them at once (real ZooKeeper,
real bookie processes)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from tests.support.autorecovery import service_metrics, until_logged, watched_cluster
from tests.support.bookies import BookieFactory
from tests.support.recover_cluster import ledger_on, pybk_shell

from autorecovery import AutoRecovery
from autorecovery import service as service_module
from bkclient import BookKeeper
from bkmeta import MetadataClient
from bkproto.errors import MetadataStoreError
from bookie.config import AutoRecoverySettings

pytestmark = pytest.mark.integration

DISABLE = "/ledgers/underreplication/disable"
DELAY = "/ledgers/underreplication/lostBookieRecoveryDelay"


def _json(zk_hosts: str, *args: str) -> dict[str, object]:
    result = pybk_shell(zk_hosts, *args)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


async def _until_replaced(bk: BookKeeper, ledger_id: int, bookie_id: str) -> None:
    async with asyncio.timeout(30):
        while True:
            if bookie_id not in (await bk.ledger_metadata(ledger_id)).all_bookies():
                return
            await asyncio.sleep(0.3)


def _raw(zk_hosts: str) -> KazooClient:
    """A plain kazoo session under the test's chroot, to see the znodes as BookKeeper would."""
    zk = KazooClient(hosts=zk_hosts, timeout=10.0)
    zk.start(timeout=15)
    return zk


async def test_shell_switches_use_bookkeepers_znodes(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    zk = await asyncio.to_thread(_raw, zk_hosts)
    try:
        assert await asyncio.to_thread(_json, zk_hosts, "autorecovery") == {"enabled": True, "changed": False}
        assert await asyncio.to_thread(_json, zk_hosts, "autorecovery", "--disable") == {
            "enabled": False, "changed": True}
        assert zk.exists(DISABLE) is not None
        again = await asyncio.to_thread(pybk_shell, zk_hosts, "autorecovery", "-d", as_json=False)
        assert again.returncode == 0 and "already disabled" in again.stdout
        status = await asyncio.to_thread(_json, zk_hosts, "autorecovery", "-s")
        assert status == {"enabled": False, "changed": False}
        enabled = await asyncio.to_thread(_json, zk_hosts, "autorecovery", "-e")
        assert enabled == {"enabled": True, "changed": True}
        assert zk.exists(DISABLE) is None

        for command in ("whoisauditor", "triggeraudit"):  # no autorecovery has run
            nobody = await asyncio.to_thread(pybk_shell, zk_hosts, command)
            assert nobody.returncode == 1, nobody.stderr
            assert json.loads(nobody.stdout) in (
                {"auditor": None},
                {"triggered": False, "reason": "no autorecovery is leading (is pybk autorecovery running?)"},
            )
        unset = await asyncio.to_thread(_json, zk_hosts, "lostbookierecoverydelay", "--get")
        assert unset["lost_bookie_recovery_delay_s"] is None
        await asyncio.to_thread(_json, zk_hosts, "lostbookierecoverydelay", "--set", "30")
        assert zk.get(DELAY)[0] == b"30"  # BookKeeper's format: the seconds as decimal text
        zk.set(DELAY, b"45")  # as BookKeeper's own shell would write it
        got = await asyncio.to_thread(_json, zk_hosts, "lostbookierecoverydelay", "-g")
        assert got["lost_bookie_recovery_delay_s"] == 45

        for bad in ("-1", "x", str(2**31)):
            refused = await asyncio.to_thread(pybk_shell, zk_hosts, "lostbookierecoverydelay", "-s", bad)
            assert refused.returncode == 2 and "--set" in refused.stderr, refused.stderr
        neither = await asyncio.to_thread(pybk_shell, zk_hosts, "lostbookierecoverydelay")
        assert neither.returncode == 2
        zk.set(DELAY, b"soon")
        corrupt = await asyncio.to_thread(
            pybk_shell, zk_hosts, "lostbookierecoverydelay", "-g", as_json=False
        )
        assert corrupt.returncode == 1 and "not a delay in seconds" in corrupt.stderr, corrupt.stderr
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)


async def test_disabled_autorecovery_copies_nothing_until_enabled(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    log_path = tmp_path / "autorecovery.log"
    async with watched_cluster(
        zk_hosts, bookie_factory, log_path, auditorPeriodicBookieCheckInterval="0"
    ) as (bookies, bk, _):
        victim = bookies[0]
        await asyncio.to_thread(_json, zk_hosts, "autorecovery", "--disable")  # say, a rolling restart
        ledger = await ledger_on(bk, victim.bookie_id)
        for i in range(20):
            await ledger.append(b"entry %d" % i)
        await ledger.close()
        await until_logged(log_path, "leading autorecovery")
        await asyncio.to_thread(victim.kill9)
        await until_logged(log_path, "is gone", timeout_s=30)
        await asyncio.sleep(3)  # a leader that ignored the switch would be copying by now
        assert victim.bookie_id in (await bk.ledger_metadata(ledger.ledger_id)).all_bookies()
        metrics = await asyncio.to_thread(service_metrics, log_path)
        assert metrics["autorecovery_replication_enabled"] == 0
        assert metrics["autorecovery_lost_bookies"] == 1
        assert "re-replicating their ledgers" not in log_path.read_text()  # not even tried
        refused = await asyncio.to_thread(pybk_shell, zk_hosts, "triggeraudit")
        assert refused.returncode == 1 and "disabled" in json.loads(refused.stdout)["reason"]

        await asyncio.to_thread(_json, zk_hosts, "autorecovery", "--enable")  # the watch wakes it
        await _until_replaced(bk, ledger.ledger_id, victim.bookie_id)
        metrics = await asyncio.to_thread(service_metrics, log_path)
        assert metrics["autorecovery_replication_enabled"] == 1
        assert metrics["autorecovery_ledgers_rereplicated_total"] == 1
    log = log_path.read_text()
    assert "ledger re-replication is disabled" in log and "ledger re-replication enabled" in log


async def test_the_clusters_delay_overrides_the_configured_one_at_runtime(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    log_path = tmp_path / "autorecovery.log"
    async with watched_cluster(zk_hosts, bookie_factory, log_path, lostBookieRecoveryDelay="3600",
                               auditorPeriodicBookieCheckInterval="0") as (bookies, bk, service):
        victim = bookies[0]
        ledger = await ledger_on(bk, victim.bookie_id)
        await ledger.append(b"copied once the operator says so")
        await ledger.close()
        # the leader seeds the cluster's value from its configuration
        await until_logged(log_path, "cluster lostBookieRecoveryDelay set to 3600 s")
        got = await asyncio.to_thread(_json, zk_hosts, "lostbookierecoverydelay", "--get")
        assert got["lost_bookie_recovery_delay_s"] == 3600
        auditor = await asyncio.to_thread(_json, zk_hosts, "whoisauditor")
        assert str(auditor["auditor"]).endswith(f":{service.pid}")  # host:pid
        await asyncio.to_thread(victim.kill9)
        await until_logged(log_path, "is gone", timeout_s=30)
        metrics = await asyncio.to_thread(service_metrics, log_path)
        assert metrics["autorecovery_lost_bookie_delay_seconds"] == 3600

        # a new value: the wait starts again from the change, with the new length
        await asyncio.to_thread(_json, zk_hosts, "lostbookierecoverydelay", "--set", "7200")
        await until_logged(log_path, "lostBookieRecoveryDelay changed to 7200 s")
        metrics = await asyncio.to_thread(service_metrics, log_path)
        assert metrics["autorecovery_lost_bookie_delay_seconds"] == 7200
        assert victim.bookie_id in (await bk.ledger_metadata(ledger.ledger_id)).all_bookies()
        # the same value again, as triggeraudit writes it: BookKeeper's "audit now"
        await asyncio.to_thread(_json, zk_hosts, "triggeraudit")
        await _until_replaced(bk, ledger.ledger_id, victim.bookie_id)
        await until_logged(log_path, "written with its own value")


async def test_rereading_the_switches_sets_one_watch_per_znode(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    async with await BookKeeper.connect(zk_hosts) as bk:
        service = AutoRecovery(bk, AutoRecoverySettings(check_interval_s=0), "test")
        service._switches.new_term()
        control = bk.ctx.metadata.replication_control
        for _ in range(5):  # each check reads (and watches) both znodes again
            await service.check()
        await control.disable()  # a fired watch is set again by the next read, once
        await service.check()
        await service.check()
        watchers = bk.ctx.metadata.zk.kazoo._data_watchers
        for path in (control.disable_path, control.delay_path):
            held = [len(w) for key, w in watchers.items() if key.endswith(path)]
            assert held == [1], (path, dict(watchers))


async def test_with_two_bookies_gone_nothing_waits_for_the_delay(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    log_path = tmp_path / "autorecovery.log"
    async with watched_cluster(zk_hosts, bookie_factory, log_path, lostBookieRecoveryDelay="3600",
                               auditorPeriodicBookieCheckInterval="0") as (bookies, bk, _):
        first, second = bookies[0].bookie_id, bookies[1].bookie_id
        ledgers = []
        for on, off in ((first, second), (second, first)):  # each names one of the two
            while True:
                handle = await bk.create_ledger(2, 2, 2, password=b"two-gone")
                if on in handle.ensemble and off not in handle.ensemble:
                    break
                await handle.close()
                await bk.delete_ledger(handle.ledger_id)
            await handle.append(b"one entry")
            await handle.close()
            ledgers.append(handle.ledger_id)
        await until_logged(log_path, "leading autorecovery")
        await asyncio.gather(asyncio.to_thread(bookies[0].kill9), asyncio.to_thread(bookies[1].kill9))
        await _until_replaced(bk, ledgers[0], first)
        await _until_replaced(bk, ledgers[1], second)
    assert "2 bookies are gone: re-replicating without waiting" in log_path.read_text()


async def test_a_failed_check_keeps_the_terms_clocks(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    lost = "10.9.9.9:3181"  # named by a ledger, registered nowhere
    checks: list[float] = []

    async def ledgers_by_bookie() -> dict[str, set[int]]:
        checks.append(asyncio.get_running_loop().time())
        if len(checks) == 2:
            raise MetadataStoreError("a ZooKeeper read timed out")
        return {lost: {1}}

    async def unregistered(named: object) -> set[str]:
        return {lost}

    monkeypatch.setattr(service_module, "_LEADER_ERROR_PAUSE_S", 0.1)
    async with await BookKeeper.connect(zk_hosts) as bk:
        service = AutoRecovery(bk, AutoRecoverySettings(lost_bookie_delay_s=3600, check_interval_s=0), "test")
        monkeypatch.setattr(service._admin, "ledgers_by_bookie", ledgers_by_bookie)
        monkeypatch.setattr(service._admin, "unregistered", unregistered)
        await service.start()
        try:
            async with asyncio.timeout(30):
                while len(checks) < 3:  # the first sees it gone, the second fails, the third goes on
                    service._wake.set()
                    await asyncio.sleep(0.2)
            now = asyncio.get_running_loop().time()
            assert service.is_leader
            assert service._lost.gone_for(lost, now) >= now - checks[1]  # seen gone before the failure
        finally:
            await service.close()
