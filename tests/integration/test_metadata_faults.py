"""ZooKeeper faults: server down, connection loss mid-write, and recovery."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss
from tests.support.ports import restartable_port

from bkmeta import MetadataClient, ZkClient
from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer, free_port
from bkproto.errors import MetadataStoreError, MetadataVersionError

pytestmark = pytest.mark.integration


def _lose_reply_of_first_call(zk: ZkClient, method: str) -> list[int]:
    """Make the first ``method`` call reach ZooKeeper but report ConnectionLoss, as when the
    connection drops after the server applied the request."""
    real = getattr(zk.kazoo, method)
    calls = [0]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        result = real(*args, **kwargs)
        if calls[0] > 1:
            return result
        lost = zk.kazoo.handler.async_result()
        result.rawlink(lambda _r: lost.set_exception(ConnectionLoss()))
        return lost

    setattr(zk.kazoo, method, flaky)
    return calls


async def test_retried_create_that_finds_its_own_node_succeeds(zk_hosts: str) -> None:
    async with ZkClient.for_hosts(zk_hosts) as zk:
        calls = _lose_reply_of_first_call(zk, "create_async")
        assert await zk.create("/mine", b"data") == "/mine"
        assert calls[0] == 2
        assert (await zk.get("/mine"))[0] == b"data"


async def test_retried_cas_that_finds_its_own_write_succeeds(zk_hosts: str) -> None:
    async with ZkClient.for_hosts(zk_hosts) as zk:
        await zk.create("/node", b"v0")
        calls = _lose_reply_of_first_call(zk, "set_async")
        stat = await zk.set("/node", b"v1", 0)
        assert calls[0] == 2 and stat.version == 1
        # A real conflict is still a conflict.
        with pytest.raises(MetadataVersionError):
            await zk.set("/node", b"v2", 0)


async def test_retried_delete_that_already_deleted_succeeds(zk_hosts: str) -> None:
    async with ZkClient.for_hosts(zk_hosts) as zk:
        await zk.create("/gone", b"")
        calls = _lose_reply_of_first_call(zk, "delete_async")
        await zk.delete("/gone")
        assert calls[0] == 2 and await zk.exists("/gone") is None


async def test_zookeeper_down_gives_bounded_retries_then_clear_error(tmp_path: Path) -> None:
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path, port=restartable_port()))  # restarted below
    server.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server.wait_ready()
        meta = await MetadataClient.connect(
            server.hosts,
            require_cluster=False,
            operation_timeout_s=1.0,
            max_attempts=3,
            session_timeout_s=30.0,
        )
        async with meta:
            await meta.init_new_cluster()
            server.kill()
            with pytest.raises(MetadataStoreError, match="unavailable after 3 attempts") as info:
                await meta.ledger_manager.read_ledger_metadata(1)
            assert "/ledgers/00/0000/L0001" in str(info.value)
            # ZooKeeper comes back (same data dir): the same client works again once kazoo's
            # reconnect (with its own backoff, grown while the server was down) gets through.
            server.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            server.wait_ready()
            await meta.zk.wait_connected(60.0)
            assert await meta.ledger_manager.list_ledgers() == []
    finally:
        server.stop()


async def test_connect_to_absent_zookeeper_fails_clearly() -> None:
    hosts = f"127.0.0.1:{free_port()}"
    with pytest.raises(MetadataStoreError, match=f"cannot connect to ZooKeeper at {hosts}"):
        await MetadataClient.connect(hosts, connect_timeout_s=1.0)
