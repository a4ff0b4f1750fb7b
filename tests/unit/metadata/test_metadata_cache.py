"""The watched ledger metadata cache over the in-memory ZooKeeper: it answers re-reads, and never
again after another client changed or deleted the ledger, nor across a disconnection."""

from __future__ import annotations

import pytest
from tests.support.memory_zk import open_metadata, settle

from bkmeta.layout import ZkLayout
from bkmeta.ledger_manager import ZkLedgerManager
from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.metadata_cache import WatchedMetadataCache
from bkmeta.model import LedgerState, Versioned
from bkproto.errors import MetadataVersionError, NoSuchLedgerError


async def test_a_reread_is_answered_by_the_cache_until_another_client_changes_the_ledger() -> None:
    server = MemoryZooKeeper()
    reader, writer = ZkLedgerManager(server.session()), ZkLedgerManager(server.session())
    ledger_id, _ = await writer.create_ledger(open_metadata())
    first = await reader.read_ledger_metadata_cached(ledger_id)
    assert (reader.cache.hits, reader.cache.misses) == (0, 1)
    assert await reader.read_ledger_metadata_cached(ledger_id) == first
    assert reader.cache.hits == 1
    await writer.write_ledger_metadata(ledger_id, open_metadata().with_closed(9, 100), 0)
    await settle()  # the watch event reaches the reader's loop
    after = await reader.read_ledger_metadata_cached(ledger_id)
    assert after.version == 1 and after.value.is_closed
    await writer.remove_ledger_metadata(ledger_id)
    await settle()
    with pytest.raises(NoSuchLedgerError):
        await reader.read_ledger_metadata_cached(ledger_id)
    await reader.close()
    await writer.close()


async def test_own_writes_and_conflicts_send_the_next_read_to_zookeeper() -> None:
    server = MemoryZooKeeper()
    lm, other = ZkLedgerManager(server.session()), ZkLedgerManager(server.session())
    ledger_id, _ = await lm.create_ledger(open_metadata())
    await lm.read_ledger_metadata_cached(ledger_id)
    await other.write_ledger_metadata(ledger_id, open_metadata().with_state(LedgerState.IN_RECOVERY), 0)
    # Before the watch event arrives, our CAS from the cached version fails...
    with pytest.raises(MetadataVersionError):
        await lm.write_ledger_metadata(ledger_id, open_metadata().with_closed(-1, 0), 0)
    # ...and the read after the conflict is ZooKeeper's, not the cache's.
    assert (await lm.read_ledger_metadata_cached(ledger_id)).version == 1
    written = await lm.write_ledger_metadata(ledger_id, open_metadata().with_closed(-1, 0), 1)
    assert await lm.read_ledger_metadata_cached(ledger_id) == written
    await lm.close()
    await other.close()


async def test_a_disconnection_empties_the_cache() -> None:
    server = MemoryZooKeeper()
    session = server.session()
    lm, writer = ZkLedgerManager(session), ZkLedgerManager(server.session())
    ledger_id, _ = await writer.create_ledger(open_metadata())
    await lm.read_ledger_metadata_cached(ledger_id)
    assert len(lm.cache) == 1
    session.disconnect()
    await settle()
    assert len(lm.cache) == 0
    session.reconnect()
    await settle()
    await writer.write_ledger_metadata(ledger_id, open_metadata().with_closed(-1, 0), 0)
    assert (await lm.read_ledger_metadata_cached(ledger_id)).version == 1
    await lm.close()
    await writer.close()


def test_a_read_whose_watch_fired_before_its_answer_was_handled_does_not_fill_the_cache() -> None:
    cache = WatchedMetadataCache(MemoryZooKeeper().session(), ZkLayout())
    value = Versioned(open_metadata(), 0)
    ticket = cache.begin_read(7)
    assert ticket is not None
    cache.invalidate(7)  # the event of the read's own watch, handled before the read's answer
    cache.fill(7, ticket, value)
    assert cache.get(7) is None
    ticket = cache.begin_read(7)
    assert ticket is not None
    cache.fill(7, ticket, value)
    assert cache.get(7) == value


async def test_past_its_capacity_reads_are_served_fresh_and_not_cached() -> None:
    server = MemoryZooKeeper()
    lm = ZkLedgerManager(server.session(), cache_capacity=2)
    ids = [(await lm.create_ledger(open_metadata()))[0] for _ in range(3)]
    for ledger_id in ids:
        await lm.read_ledger_metadata_cached(ledger_id)
    assert len(lm.cache) == 2
    await lm.read_ledger_metadata_cached(ids[2])
    assert lm.cache.misses == 4
    await lm.close()


async def test_plain_reads_leave_the_cache_alone_unless_they_show_it_outdated() -> None:
    server = MemoryZooKeeper()
    lm = ZkLedgerManager(server.session())
    first, _ = await lm.create_ledger(open_metadata())
    second, v0 = await lm.create_ledger(open_metadata())
    await lm.read_ledger_metadata(first)  # as GC or the shell read: no entry, no watch
    assert len(lm.cache) == 0
    await lm.write_ledger_metadata(second, open_metadata().with_closed(-1, 0), 0)
    # An entry still at version 0, as when the watch event of the change has not arrived yet.
    ticket = lm.cache.begin_read(second)
    assert ticket is not None
    lm.cache.fill(second, ticket, v0)
    assert (await lm.read_ledger_metadata(second)).version == 1
    assert lm.cache.peek(second) is None
    await lm.close()
