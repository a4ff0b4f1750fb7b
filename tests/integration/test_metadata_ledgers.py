"""Ledger metadata CRUD, CAS, ids, iteration and watches against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from tests.support.zookeeper import expire_kazoo_session

from bkmeta import (
    DigestType,
    LedgerMetadata,
    LedgerState,
    MetadataClient,
    Segment,
    Versioned,
    ZkLedgerManager,
    serialize,
)
from bkmeta.layout import INT_MAX
from bkmeta.serde import CorruptLedgerMetadataError
from bkproto.errors import LedgerExistsError, MetadataVersionError, NoSuchLedgerError

pytestmark = pytest.mark.integration

BOOKIES = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def metadata(**overrides: object) -> LedgerMetadata:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum_size": 2,
        "ack_quorum_size": 2,
        "state": LedgerState.OPEN,
        "last_entry_id": -1,
        "length": 0,
        "digest_type": DigestType.CRC32C,
        "password": b"pw",
        "ctime": 1_700_000_000_000,
        "custom_metadata": {"app": b"test"},
        "segments": (Segment(0, BOOKIES),),
    }
    fields.update(overrides)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def meta(zk_hosts: str) -> AsyncIterator[MetadataClient]:
    client = await MetadataClient.connect(zk_hosts, require_cluster=False)
    await client.init_new_cluster()
    async with client:
        yield client


async def test_create_read_update_delete(meta: MetadataClient) -> None:
    lm = meta.ledger_manager
    created = await lm.create_ledger_metadata(7, metadata())
    assert created.version == 0
    read = await lm.read_ledger_metadata(7)
    assert read == Versioned(metadata(), 0)
    closed = read.value.with_closed(last_entry_id=99, length=12345)
    written = await lm.write_ledger_metadata(7, closed, read.version)
    assert written.version == 1
    again = await lm.read_ledger_metadata(7)
    assert again.value.is_closed and again.value.last_entry_id == 99 and again.value.length == 12345
    with pytest.raises(LedgerExistsError):
        await lm.create_ledger_metadata(7, metadata())
    await lm.remove_ledger_metadata(7, again.version)
    with pytest.raises(NoSuchLedgerError):
        await lm.read_ledger_metadata(7)
    with pytest.raises(NoSuchLedgerError):
        await lm.remove_ledger_metadata(7)


async def test_znode_path_and_bytes_follow_bookkeeper_layout(meta: MetadataClient) -> None:
    await meta.ledger_manager.create_ledger_metadata(12345, metadata())
    data, _ = await meta.zk.get("/ledgers/00/0001/L2345")
    assert data == serialize(metadata())


async def test_stale_version_write_is_rejected(meta: MetadataClient) -> None:
    lm = meta.ledger_manager
    v0 = await lm.create_ledger_metadata(1, metadata())
    await lm.write_ledger_metadata(1, v0.value.with_state(LedgerState.IN_RECOVERY), v0.version)
    with pytest.raises(MetadataVersionError):
        await lm.write_ledger_metadata(1, v0.value.with_closed(5, 50), v0.version)
    assert (await lm.read_ledger_metadata(1)).value.state == LedgerState.IN_RECOVERY


async def test_concurrent_cas_updates_never_lose_an_update(meta: MetadataClient) -> None:
    """Each writer appends its own custom-metadata key with read-modify-CAS retried on conflict."""
    lm = meta.ledger_manager
    await lm.create_ledger_metadata(3, metadata(custom_metadata={}))
    conflicts = 0

    async def add_key(key: str) -> None:
        nonlocal conflicts
        while True:
            current = await lm.read_ledger_metadata(3)
            custom = dict(current.value.custom_metadata)
            custom[key] = key.encode()


            updated = dataclasses.replace(current.value, custom_metadata=custom)
            try:
                await lm.write_ledger_metadata(3, updated, current.version)
                return
            except MetadataVersionError:
                conflicts += 1

    keys = [f"k{i}" for i in range(30)]
    await asyncio.gather(*(add_key(k) for k in keys))
    final = await lm.read_ledger_metadata(3)
    assert sorted(final.value.custom_metadata) == sorted(keys)
    assert final.version == len(keys)
    assert conflicts > 0  # the test really exercised contention


async def test_generated_ids_are_unique_and_nodes_removed(meta: MetadataClient) -> None:
    ids = await asyncio.gather(*(meta.ledger_manager.generate_ledger_id() for _ in range(50)))
    assert len(set(ids)) == 50
    assert all(0 <= i < INT_MAX for i in ids)
    assert await meta.zk.get_children("/ledgers/idgen") == []


async def test_long_id_scheme(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
        await meta.zk.create("/ledgers/idgen-long", b"")
        lm = meta.ledger_manager
        ids = [await lm.generate_ledger_id() for _ in range(3)]
        assert all(i >= 2**32 for i in ids) and len(set(ids)) == 3
        assert [i >> 32 for i in ids] == [1, 1, 1]
        await lm.create_ledger_metadata(ids[0], metadata())
        assert (await lm.read_ledger_metadata(ids[0])).value == metadata()
        s = f"{ids[0]:019d}"
        assert await meta.zk.exists(
            f"/ledgers/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"
        ) is not None
        # A second client sees the long scheme too and never repeats an id.
        other = ZkLedgerManager(meta.zk, meta.layout)
        more = [await other.generate_ledger_id() for _ in range(3)]
        assert not set(more) & set(ids) and all(i >= 2**32 for i in more)


async def test_list_and_iterate_in_id_order(meta: MetadataClient) -> None:
    lm = meta.ledger_manager
    wanted = [0, 1, 9999, 10000, 123456789, INT_MAX - 1, INT_MAX, 2**40 + 5, 2**62]
    for ledger_id in reversed(wanted):
        await lm.create_ledger_metadata(ledger_id, metadata())
    assert await lm.list_ledgers() == wanted
    batches = [b async for b in lm.ledger_ranges()]
    assert [i for b in batches for i in b] == wanted
    assert all(b == sorted(b) for b in batches)


async def test_watch_fires_on_change_and_delete(meta: MetadataClient) -> None:
    lm = meta.ledger_manager
    v0 = await lm.create_ledger_metadata(42, metadata())
    seen: asyncio.Queue[Versioned[LedgerMetadata] | None] = asyncio.Queue()
    lm.watch_ledger(42, seen.put_nowait)
    assert await asyncio.wait_for(seen.get(), 10) == v0  # the current value once armed
    second: asyncio.Queue[Versioned[LedgerMetadata] | None] = asyncio.Queue()
    lm.watch_ledger(42, second.put_nowait)
    assert await asyncio.wait_for(second.get(), 10) == v0
    await lm.write_ledger_metadata(42, v0.value.with_closed(10, 100), v0.version)
    update = await asyncio.wait_for(seen.get(), 10)
    assert update is not None and update.version == 1 and update.value.last_entry_id == 10
    assert (await asyncio.wait_for(second.get(), 10)) == update
    lm.unwatch_ledger(42, second.put_nowait)
    await lm.remove_ledger_metadata(42)
    assert await asyncio.wait_for(seen.get(), 10) is None
    assert second.empty()  # unwatched: told nothing more


async def test_corrupt_znode_names_ledger_and_path(meta: MetadataClient) -> None:
    await meta.zk.create("/ledgers/00/0000/L0077", b"garbage", makepath=True)
    with pytest.raises(CorruptLedgerMetadataError) as info:
        await meta.ledger_manager.read_ledger_metadata(77)
    assert "ledger 77" in str(info.value) and "/ledgers/00/0000/L0077" in str(info.value)


async def test_create_ledger_allocates_and_stores(meta: MetadataClient) -> None:
    ids = set()
    for _ in range(5):
        ledger_id, versioned = await meta.ledger_manager.create_ledger(metadata())
        ids.add(ledger_id)
        assert versioned.version == 0
        assert (await meta.ledger_manager.read_ledger_metadata(ledger_id)).value == metadata()
    assert len(ids) == 5


async def test_watch_survives_session_expiry(zk_hosts: str, meta: MetadataClient) -> None:
    lm = meta.ledger_manager
    v0 = await lm.create_ledger_metadata(43, metadata())
    seen: asyncio.Queue[Versioned[LedgerMetadata] | None] = asyncio.Queue()
    lm.watch_ledger(43, seen.put_nowait)
    assert await asyncio.wait_for(seen.get(), 10) == v0
    await asyncio.to_thread(expire_kazoo_session, meta.zk.kazoo)
    async with await MetadataClient.connect(zk_hosts, watch_bookies=False) as writer:
        await writer.ledger_manager.write_ledger_metadata(43, v0.value.with_closed(1, 2), v0.version)

    async def closed_seen() -> None:
        while True:
            update = await seen.get()
            if update is not None and update.value.is_closed:
                return

    await asyncio.wait_for(closed_seen(), 15)


async def test_cached_reads_stop_once_another_client_changes_the_ledger(
    zk_hosts: str, meta: MetadataClient
) -> None:
    lm = meta.ledger_manager
    v0 = await lm.create_ledger_metadata(44, metadata())
    assert await lm.read_ledger_metadata_cached(44) == v0  # from ZooKeeper, with a watch
    assert await lm.read_ledger_metadata_cached(44) == v0 and lm.cache.hits == 1
    async with await MetadataClient.connect(zk_hosts, watch_bookies=False) as writer:
        await writer.ledger_manager.write_ledger_metadata(44, v0.value.with_closed(1, 2), v0.version)

    async def cache_dropped() -> None:
        while lm.cache.get(44) is not None:  # noqa: ASYNC110 - the cache offers no event to wait on
            await asyncio.sleep(0.01)

    await asyncio.wait_for(cache_dropped(), 15)  # the watch event, not a clock, empties it
    after = await lm.read_ledger_metadata_cached(44)
    assert after.version == 1 and after.value.is_closed


async def test_a_burst_of_cold_reads_is_one_multi_read_whose_watches_still_fire(
    zk_hosts: str, meta: MetadataClient
) -> None:
    """Reads made together leave as one multiRead, which sets no watch: the watches come from the
    SetWatches that follows it, so a change by another client must still empty the cache."""
    lm = meta.ledger_manager
    ids = list(range(300, 340))
    created = {i: await lm.create_ledger_metadata(i, metadata()) for i in ids}
    connection = meta.zk.kazoo._connection
    before = connection.reads_coalesced
    results = await asyncio.gather(
        *(lm.read_ledger_metadata_cached(i) for i in ids),
        lm.read_ledger_metadata_cached(399),  # no such ledger: fails alone
        return_exceptions=True,
    )
    assert results[:-1] == [created[i] for i in ids]
    assert isinstance(results[-1], NoSuchLedgerError)
    assert connection.reads_coalesced - before >= 2, connection.reads_coalesced - before
    assert all(lm.cache.get(i) is not None for i in ids)
    async with await MetadataClient.connect(zk_hosts, watch_bookies=False) as writer:
        await writer.ledger_manager.write_ledger_metadata(305, created[305].value.with_closed(1, 2), 0)
        await writer.ledger_manager.remove_ledger_metadata(333)

    async def cache_dropped() -> None:
        while lm.cache.get(305) is not None or lm.cache.get(333) is not None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(cache_dropped(), 15)  # the watch events, not a clock, empty it
    assert all(lm.cache.get(i) is not None for i in ids if i not in (305, 333))
    assert (await lm.read_ledger_metadata_cached(305)).value.is_closed
