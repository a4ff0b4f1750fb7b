"""The whole of bkmeta's client side over the in-memory ZooKeeper, as the simulation runs it:
cluster set-up, a bookie registering (and re-registering after its session expires), the
client's live bookie view following it, ledgers created and listed."""

from __future__ import annotations

from pathlib import Path

from tests.support.memory_zk import settle

from bkmeta.bookie_presence import BookiePresence
from bkmeta.layout import ZkLayout
from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.metadata_client import MetadataClient
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkmeta.registration import BookieServiceInfo


def ledger_metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.OPEN,
        last_entry_id=-1, length=0, digest_type=DigestType.CRC32C, password=b"", ctime=0,
        segments=(Segment(0, ("10.0.0.1:3181",)),),
    )


async def test_a_cluster_of_metadata_clients_over_one_memory_zookeeper() -> None:
    server = MemoryZooKeeper()
    admin = MetadataClient(server.session(), ZkLayout())
    assert await admin.init_new_cluster()
    client = MetadataClient(server.session(), ZkLayout())
    await client.bookie_watcher.start()
    bookie_session = server.session()
    bookie = MetadataClient(bookie_session, ZkLayout())
    registration = bookie.bookie_registration(BookieServiceInfo.for_address("10.0.0.1", 3181))
    await registration.register()
    await client.bookie_watcher.wait_for(lambda w: "10.0.0.1:3181" in w.writable_bookies(), 5)

    bookie_session.expire()  # the ephemeral goes; the registration comes back on the new session
    await settle(50)
    assert "10.0.0.1:3181" in client.bookie_watcher.writable_bookies()
    assert server.ephemerals(bookie_session.session_id) == ["/ledgers/available/10.0.0.1:3181"]
    assert await client.bookie_watcher.is_registered("10.0.0.1:3181")

    await registration.set_read_only(True)
    await client.bookie_watcher.wait_for(lambda w: "10.0.0.1:3181" in w.readonly_bookies(), 5)
    await registration.close()
    await client.bookie_watcher.wait_for(lambda w: not w.all_bookies(), 5)

    ids = [(await client.ledger_manager.create_ledger(ledger_metadata()))[0] for _ in range(3)]
    assert await admin.ledger_manager.list_ledgers() == sorted(ids) == [0, 1, 2]

    for client_ in (bookie, client, admin):
        await client_.close()
    assert server.ephemerals() == []


async def test_a_bookies_presence_over_the_memory_zookeeper(tmp_path: Path) -> None:
    server = MemoryZooKeeper()
    admin = await MetadataClient.over(server.session(), require_cluster=False, watch_bookies=False)
    await admin.init_new_cluster()
    info = BookieServiceInfo.for_address("10.0.0.2", 3181)
    presence = BookiePresence("unused", info, [tmp_path / "j"], [tmp_path / "l"], store=server.session())
    await presence.start()  # the cookie is checked (here: created) in the store and the directories
    assert presence.cookie is not None and "/ledgers/cookies/10.0.0.2:3181" in server.paths()
    await presence.register(add_port=4181)
    assert server.ephemerals() == ["/ledgers/available/10.0.0.2:3181"]
    await admin.ledger_manager.create_ledger(ledger_metadata())
    assert await presence.ledger_ids() == {0}
    await presence.close()
    assert server.ephemerals() == []
    await admin.close()
