"""The add port in a real cluster: bookies advertise it, clients send adds over it, and a bookie
without one (``bookieAddPort=-1``) takes the same adds over gRPC in the same ensemble."""

from __future__ import annotations

import asyncio
import os
import re

import pytest
from tests.support.admin_http import get_ok_text
from tests.support.bookies import BookieFactory, BookieProcess

from bkclient import BookKeeper, DigestType
from bkclient.config import ClientConfig
from bkmeta import MetadataClient

pytestmark = pytest.mark.integration

PASSWORD = b"add-port"


def gauge(bookie: BookieProcess, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", get_ok_text(bookie.http_port, "/metrics"), re.MULTILINE)
    assert match, f"{name} not in the metrics of {bookie.address}"
    return float(match.group(1))


def adds_received(bookie: BookieProcess) -> float:
    return gauge(bookie, r'bookkeeper_server_ADD_ENTRY_REQUEST_count\{success="true"\}')


@pytest.mark.parametrize("use_add_port", [True, False], ids=["client on the add port", "client on gRPC"])
async def test_adds_use_the_add_port_where_a_bookie_has_one(
    zk_hosts: str, bookie_factory: BookieFactory, use_add_port: bool
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    with_port = [await asyncio.to_thread(bookie_factory, zk=zk_hosts) for _ in range(2)]
    without = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf={"bookieAddPort": "-1"})
    assert all(b.add_port for b in with_port) and without.add_port is None

    async with await BookKeeper.connect(zk_hosts, ClientConfig(bookie_use_add_port=use_add_port)) as bk:
        watcher = bk.ctx.bookie_watcher
        await watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        advertised = {bid: info.add_target for bid, info in watcher.writable_bookies().items()}
        assert advertised == {
            **{b.address: f"127.0.0.1:{b.add_port}" for b in with_port},
            without.address: None,
        }
        wh = await bk.create_ledger(3, 3, 3, DigestType.CRC32C, PASSWORD)
        sent = [os.urandom(100) + i.to_bytes(4, "big") for i in range(300)]
        await asyncio.gather(*(wh.append_async(data) for data in sent))
        connections = {b.address: gauge(b, "bookkeeper_server_ADD_PORT_CONNECTIONS") for b in with_port}
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
        assert [e.data async for e in rh.read(0, 299)] == sent

    expected = 1.0 if use_add_port else 0.0
    assert connections == dict.fromkeys(connections, expected)
    assert gauge(without, "bookkeeper_server_ADD_PORT_CONNECTIONS") == 0.0
    for bookie in [*with_port, without]:  # Qw = E = 3: every bookie took every entry
        assert adds_received(bookie) == 300, bookie.address


async def test_clients_beyond_a_bookies_add_port_connections_per_ip_write_over_grpc(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    # Two clients on one host, bookies whose add port takes one connection per IP address: the
    # second client's add-port connections are accepted and reset at once, and its adds go to
    # the same bookies over gRPC instead of failing over to other bookies.
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    one_per_ip = {"maxConnectionsPerIp": "1"}
    bookies = [await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=one_per_ip) for _ in range(2)]
    async with (
        await BookKeeper.connect(zk_hosts) as first,
        await BookKeeper.connect(zk_hosts) as second,
    ):
        for bk in (first, second):
            await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 2, 30.0)
        handles = [await bk.create_ledger(2, 2, 2, DigestType.CRC32C, PASSWORD) for bk in (first, second)]
        sent = [os.urandom(100) + i.to_bytes(4, "big") for i in range(200)]
        for wh in handles:
            await asyncio.gather(*(wh.append_async(data) for data in sent))
        for bookie in bookies:  # the first client's add stream; the second's were refused
            assert gauge(bookie, "bookkeeper_server_ADD_PORT_CONNECTIONS") == 1.0, bookie.address
        for wh in handles:
            await wh.close()
            assert wh.metadata.last_entry_id == 199
            assert len(wh.metadata.segments) == 1  # no bookie replaced
        rh = await second.open_ledger(handles[1].ledger_id, PASSWORD, recovery=False)
        assert [e.data async for e in rh.read(0, 199)] == sent
    for bookie in bookies:
        assert adds_received(bookie) == 400, bookie.address  # both ledgers' entries, each a copy
