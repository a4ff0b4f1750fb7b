"""Shared set-up of the read-path integration tests (no tests here): an initialised cluster in a
real ZooKeeper with real bookie processes that register themselves, and clients connected to it.

Import the ``client_cluster`` fixture into a test module to use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bkclient import BookKeeper, ClientConfig
from bkmeta import MetadataClient
from tests.support.bookies import BookieFactory, BookieProcess

pytestmark = pytest.mark.integration

PASSWORD = b"read-path"


def payload(entry_id: int, size: int = 100) -> bytes:
    """A payload that names its entry, so a misplaced or corrupted entry cannot look right."""
    head = f"entry-{entry_id:08d}:".encode()
    return (head * (size // len(head) + 1))[:size]


@dataclass
class ClientCluster:
    zk_hosts: str
    factory: BookieFactory
    bookies: list[BookieProcess]
    clients: list[BookKeeper] = field(default_factory=list)

    async def client(self, **config: Any) -> BookKeeper:
        """A client that already sees every running bookie as writable."""
        bk = await BookKeeper.connect(self.zk_hosts, ClientConfig(**config))
        self.clients.append(bk)
        running = sum(1 for b in self.bookies if b.running)
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) >= running, 30.0)
        return bk

    async def add_bookie(self) -> BookieProcess:
        bookie = await asyncio.to_thread(self.factory, zk=self.zk_hosts)
        self.bookies.append(bookie)
        return bookie

    def by_id(self, bookie_id: str) -> BookieProcess:
        for bookie in self.bookies:
            if bookie_id in (bookie.bookie_id, bookie.address):
                return bookie
        raise KeyError(bookie_id)


@pytest.fixture
async def client_cluster(zk_hosts: str, bookie_factory: BookieFactory) -> AsyncIterator[ClientCluster]:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    # One at a time: the factory names each bookie's directory after the bookies made so far.
    bookies = [await asyncio.to_thread(bookie_factory, zk=zk_hosts) for _ in range(3)]
    cluster = ClientCluster(zk_hosts, bookie_factory, bookies)
    try:
        yield cluster
    finally:
        for bk in cluster.clients:
            await bk.close()
