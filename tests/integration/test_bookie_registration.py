"""The bookie daemon in a real cluster: registration with its rack and HTTP endpoint, and the
cookie check that keeps a replaced disk from serving as if it held the data."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.bookies import BookieFactory, BookieStartError

from bkmeta import MetadataClient
from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer, free_port

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
