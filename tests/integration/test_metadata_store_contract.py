"""The ZooKeeper semantics bkmeta relies on (tests/support/store_contract.py), checked against a
real ZooKeeper through ``ZkClient``: the in-memory store of the unit tests and the simulation
must pass the same checks (tests/unit/metadata/test_memory_store.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.support.store_contract import CHECKS, Check, StoreHarness
from tests.support.zookeeper import expire_kazoo_session

from bkmeta.store import MetadataStore, SessionEvent
from bkmeta.zk import ZkClient
from bkproto.errors import MetadataStoreError

pytestmark = pytest.mark.integration


@pytest.fixture
async def harness(zk_hosts: str) -> AsyncIterator[StoreHarness]:
    clients: list[ZkClient] = []

    async def open_session() -> MetadataStore:
        client = ZkClient.for_hosts(zk_hosts)
        await client.start()
        clients.append(client)
        return client

    async def expire(store: MetadataStore) -> None:
        assert isinstance(store, ZkClient)
        renewed = asyncio.Event()

        def on_event(event: SessionEvent) -> None:
            if event == SessionEvent.NEW_SESSION:
                renewed.set()

        store.add_session_listener(on_event)
        await asyncio.to_thread(expire_kazoo_session, store.kazoo)
        await asyncio.wait_for(renewed.wait(), 20)
        store.remove_session_listener(on_event)

    yield StoreHarness(open_session, expire)
    for client in clients:
        await client.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_zookeeper_semantics(harness: StoreHarness, check: Check) -> None:
    await check(harness)


async def test_get_reads_any_path_kazoo_takes_and_under_a_chroot(zk_hosts: str) -> None:
    """``get`` sends a plain path's request as it is and leaves the others to kazoo, which
    normalises them (or refuses them), and adds a chroot given in the connect string."""
    async with ZkClient.for_hosts(zk_hosts) as zk:
        await zk.create("/plain/node", b"v", makepath=True)
        for path in ("/plain/node", "/plain/node/", "//plain//node"):
            data, stat = await zk.get(path)
            assert (data, stat.version) == (b"v", 0)
        with pytest.raises(MetadataStoreError):
            await zk.get("/plain/../plain/node")
    async with ZkClient.for_hosts(f"{zk_hosts}/plain") as rooted:
        assert (await rooted.get("/node"))[0] == b"v"
