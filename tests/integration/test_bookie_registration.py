"""The bookie daemon in a real cluster: registration with its rack and HTTP endpoint, and the
cookie check that keeps a replaced disk from serving as if it held the data."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.bookies import BookieFactory, BookieStartError
from tests.support.ports import restartable_port

from bkmeta import MetadataClient
from bkmeta.registration import BookieRegistration, BookieServiceInfo
from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer, free_port
from pybk.verify.proxy import FaultProxy

pytestmark = pytest.mark.integration


async def test_registered_bookie_advertises_rack_and_http(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf={"bookieRack": "/dc1/rack7"})
    async with await MetadataClient.connect(zk_hosts) as meta:
        watcher = meta.bookie_watcher
        await watcher.wait_for(lambda w: bookie.address in w.writable_bookies(), 30.0)
        info = watcher.writable_bookies()[bookie.address]
    assert info.rack == "/dc1/rack7"
    assert info.grpc_target == bookie.address
    assert bookie.http_port is not None and info.http_port == bookie.http_port


async def test_replaced_journal_disk_is_refused_before_storage_opens(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    assert await asyncio.to_thread(bookie.stop) == 0
    journal = bookie.journal_dirs[0]
    shutil.rmtree(journal)  # the "new, empty disk"
    journal.mkdir()

    with pytest.raises(BookieStartError):
        await asyncio.to_thread(bookie.start, 60.0)
    log = bookie.run_log_text()
    assert "have no cookie" in log and "Restore the disk" in log and "bookieformat -d" in log
    assert list(journal.iterdir()) == []  # storage never opened the replaced disk


async def test_bookie_stops_promptly_when_zookeeper_is_gone(
    tmp_path: Path, bookie_factory: BookieFactory
) -> None:
    # An operator stopping bookies after losing ZooKeeper must not wait for the unregister's
    # retries: the ephemeral registration goes away with the session anyway.
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path / "zk", port=free_port()))
    server.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server.wait_ready()
        async with await MetadataClient.connect(server.hosts, require_cluster=False) as meta:
            await meta.init_new_cluster()
        bookie = await asyncio.to_thread(bookie_factory, zk=server.hosts)
        server.kill()
        await asyncio.sleep(1.0)  # the bookie notices the lost connection
        started = time.monotonic()
        assert await asyncio.to_thread(bookie.stop) == 0
        assert time.monotonic() - started < 8.0
    finally:
        server.stop()


async def test_restart_during_a_zookeeper_outage_waits_for_the_previous_session(tmp_path: Path) -> None:
    # A bookie killed with -9 and restarted while ZooKeeper is down too (found by pybk verify):
    # ZooKeeper, once back, restores the dead incarnation's session with a fresh timeout, so its
    # registration stays until then. The new incarnation must wait for that expiry, not give up
    # because its own wait started while ZooKeeper could not expire anything.
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path / "zk", port=restartable_port()))
    server.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.wait_ready()
    # The previous incarnation reaches ZooKeeper through a proxy that is cut for good, as if dead.
    link = FaultProxy("previous", ("127.0.0.1", free_port()), ("127.0.0.1", server.config.port))
    await link.start()
    info = BookieServiceInfo.for_address("127.0.0.1", 3181)
    stale_wait_s = 6.0
    try:
        async with await MetadataClient.connect(server.hosts, require_cluster=False) as meta:
            await meta.init_new_cluster()
        previous = await MetadataClient.connect(
            "{}:{}".format(*link.listen), session_timeout_s=3.0)
        await previous.bookie_registration(info).register()
        link.set_partition()
        current = await MetadataClient.connect(server.hosts, session_timeout_s=10.0)
        try:
            server.kill()
            registration = BookieRegistration(current.zk, info, current.layout, stale_wait_s=stale_wait_s)
            registering = asyncio.ensure_future(registration.register())
            await asyncio.sleep(stale_wait_s + 1.0)  # longer than the wait, all with ZooKeeper down
            server.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await asyncio.to_thread(server.wait_ready)
            await asyncio.wait_for(registering, 60.0)
            _, stat = await current.zk.get(current.layout.writable_bookie(info.bookie_id))
            assert stat.ephemeralOwner == current.zk.session_id
        finally:
            await current.close()
            with contextlib.suppress(Exception):
                await previous.close()
    finally:
        await link.close()
        server.stop()
