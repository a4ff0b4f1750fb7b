"""initnewcluster / nukeexistingcluster, bookie registration and cookies against a real ZooKeeper."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.zookeeper import expire_kazoo_session

from bkmeta import (
    BookiePresence,
    BookieServiceInfo,
    ClusterLayoutError,
    ClusterNotInitializedError,
    DigestType,
    InvalidCookieError,
    LedgerMetadata,
    LedgerState,
    MetadataClient,
    Segment,
    init_new_cluster,
    nuke_existing_cluster,
    verify_or_create_cookie,
)
from bkmeta.cluster import LAYOUT_DATA
from bkproto.errors import IncorrectParameterError

pytestmark = pytest.mark.integration


@pytest.fixture
async def meta(zk_hosts: str) -> AsyncIterator[MetadataClient]:
    client = await MetadataClient.connect(zk_hosts, require_cluster=False)
    await client.init_new_cluster()
    async with client:
        yield client


async def test_init_creates_bookkeeper_layout_and_is_idempotent(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        assert await meta.init_new_cluster() is True
        first_id = meta.instance_id
        data, _ = await meta.zk.get("/ledgers/LAYOUT")
        assert data == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
        assert (await meta.zk.get("/ledgers/INSTANCEID"))[0].decode() == first_id
        for path in ("/ledgers/available", "/ledgers/available/readonly", "/ledgers/cookies"):
            assert await meta.zk.exists(path) is not None
        assert await meta.init_new_cluster() is False
        assert meta.instance_id == first_id
    async with await MetadataClient.connect(zk_hosts) as again:
        assert again.instance_id == first_id


async def test_init_refuses_a_different_cluster(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.zk.create("/ledgers/LAYOUT", b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1",
                             makepath=True)
        with pytest.raises(ClusterLayoutError, match="FlatLedgerManagerFactory"):
            await init_new_cluster(meta.zk)
        data, _ = await meta.zk.get("/ledgers/LAYOUT")
        assert data != LAYOUT_DATA  # untouched


async def test_init_refuses_unknown_data_under_root(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.zk.create("/ledgers/something", b"x", makepath=True)
        with pytest.raises(ClusterLayoutError):
            await init_new_cluster(meta.zk)


async def test_connect_requires_a_cluster(zk_hosts: str) -> None:
    with pytest.raises(ClusterNotInitializedError, match="initnewcluster"):
        await MetadataClient.connect(zk_hosts)


async def test_nuke_needs_force_and_no_live_bookies(meta: MetadataClient) -> None:
    await meta.ledger_manager.create_ledger_metadata(1, _md())
    with pytest.raises(IncorrectParameterError):
        await nuke_existing_cluster(meta.zk)
    reg = meta.bookie_registration(BookieServiceInfo.for_address("127.0.0.1", 3181))
    await reg.register()
    with pytest.raises(ClusterLayoutError, match="still registered"):
        await nuke_existing_cluster(meta.zk, force=True)
    await reg.close()
    with pytest.raises(ClusterLayoutError, match="mismatch"):
        await nuke_existing_cluster(meta.zk, instance_id="not-this-one")
    assert await nuke_existing_cluster(meta.zk, instance_id=meta.instance_id) is True
    assert await meta.zk.exists("/ledgers") is None
    assert await nuke_existing_cluster(meta.zk, force=True) is False


def _md() -> LedgerMetadata:
    return LedgerMetadata(
        1, 1, 1, LedgerState.OPEN, -1, 0, DigestType.CRC32, b"", 0, {}, (Segment(0, ("b:1",)),)
    )


async def test_registration_is_ephemeral_moves_to_readonly_and_is_watched(
    zk_hosts: str, meta: MetadataClient
) -> None:
    info = BookieServiceInfo("127.0.0.1:3181", "127.0.0.1", 3181, "127.0.0.1", 8080, rack="/r1")
    bookie_side = await MetadataClient.connect(zk_hosts, watch_bookies=False)
    reg = bookie_side.bookie_registration(info)
    await reg.register()
    watcher = meta.bookie_watcher
    await watcher.wait_for(lambda w: "127.0.0.1:3181" in w.writable_bookies(), 10)
    seen = watcher.writable_bookies()["127.0.0.1:3181"]
    assert seen == info and seen.http_port == 8080 and seen.rack == "/r1"
    stat = await meta.zk.exists("/ledgers/available/127.0.0.1:3181")
    assert stat is not None and stat.ephemeralOwner == bookie_side.zk.session_id

    await reg.set_read_only(True)
    await watcher.wait_for(
        lambda w: not w.writable_bookies() and "127.0.0.1:3181" in w.readonly_bookies(), 10
    )
    await reg.set_read_only(False)
    await watcher.wait_for(
        lambda w: "127.0.0.1:3181" in w.writable_bookies() and not w.readonly_bookies(), 10
    )

    await bookie_side.close()  # session ends: the ephemeral goes
    await watcher.wait_for(lambda w: not w.writable_bookies(), 10)


async def test_registration_survives_session_expiry(zk_hosts: str, meta: MetadataClient) -> None:
    info = BookieServiceInfo.for_address("127.0.0.1", 3182)
    async with await MetadataClient.connect(zk_hosts, watch_bookies=False) as bookie_side:
        reg = bookie_side.bookie_registration(info)
        await reg.register(read_only=True)
        old_session = bookie_side.zk.session_id
        await asyncio.to_thread(expire_kazoo_session, bookie_side.zk.kazoo)
        assert bookie_side.zk.session_id != old_session

        async def registered_under_new_session() -> None:
            while True:
                stat = await meta.zk.exists("/ledgers/available/readonly/127.0.0.1:3182")
                if stat is not None and stat.ephemeralOwner == bookie_side.zk.session_id:
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(registered_under_new_session(), 15)
        await meta.bookie_watcher.wait_for(lambda w: "127.0.0.1:3182" in w.readonly_bookies(), 10)
        await reg.close()
    await meta.bookie_watcher.wait_for(lambda w: not w.readonly_bookies(), 10)


async def test_watchers_survive_the_watchers_own_session_expiry(zk_hosts: str, meta: MetadataClient) -> None:
    await asyncio.to_thread(expire_kazoo_session, meta.zk.kazoo)
    async with await MetadataClient.connect(zk_hosts, watch_bookies=False) as bookie_side:
        reg = bookie_side.bookie_registration(BookieServiceInfo.for_address("127.0.0.1", 3183))
        await reg.register()
        await meta.bookie_watcher.wait_for(lambda w: "127.0.0.1:3183" in w.writable_bookies(), 10)


def _dirs(tmp_path: Path) -> tuple[list[Path], list[Path]]:
    return [tmp_path / "journal"], [tmp_path / "ledgers1", tmp_path / "ledgers2"]


async def test_cookie_created_then_verified(meta: MetadataClient, tmp_path: Path) -> None:
    journal, ledgers = _dirs(tmp_path)
    cookie = await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)
    for d in [*journal, *ledgers]:
        assert (d / "current" / "VERSION").read_bytes() == cookie.to_bytes()
    data, _ = await meta.zk.get("/ledgers/cookies/127.0.0.1:3181")
    assert data == cookie.to_bytes() and data.startswith(b"5\nbookieHost: \"127.0.0.1:3181\"")
    again = await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)
    assert again == cookie


async def test_replaced_empty_disk_refuses_to_start(meta: MetadataClient, tmp_path: Path) -> None:
    journal, ledgers = _dirs(tmp_path)
    await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)
    (ledgers[1] / "current" / "VERSION").unlink()  # the disk was swapped for an empty one
    with pytest.raises(InvalidCookieError, match=r"ledgers2.*no cookie") as info:
        await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)
    assert "pybk shell recover 127.0.0.1:3181" in str(info.value) and "bookieformat -d" in str(info.value)


async def test_changed_dirs_or_cluster_refuse_to_start(meta: MetadataClient, tmp_path: Path) -> None:
    journal, ledgers = _dirs(tmp_path)
    await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)
    with pytest.raises(InvalidCookieError, match="ledger_dirs"):
        await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers[:1], meta.instance_id)
    with pytest.raises(InvalidCookieError, match="instance_id"):
        await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, "other-cluster")
    # Data dirs of a bookie whose cluster metadata is gone.
    await meta.zk.delete("/ledgers/cookies/127.0.0.1:3181")
    with pytest.raises(InvalidCookieError, match="nuked"):
        await verify_or_create_cookie(meta.zk, "127.0.0.1:3181", journal, ledgers, meta.instance_id)


async def test_bookie_presence_checks_cookie_then_registers(
    zk_hosts: str, meta: MetadataClient, tmp_path: Path
) -> None:
    journal, ledgers = _dirs(tmp_path)
    info = BookieServiceInfo.for_address("127.0.0.1", 3190)
    presence = BookiePresence(zk_hosts, info, journal, ledgers)
    await presence.start()  # cookie only: the daemon registers once it serves
    assert presence.cookie is not None
    assert await meta.zk.exists("/ledgers/available/127.0.0.1:3190") is None
    await presence.register(http_port=8123)
    await meta.bookie_watcher.wait_for(lambda w: "127.0.0.1:3190" in w.writable_bookies(), 10)
    assert meta.bookie_watcher.writable_bookies()["127.0.0.1:3190"].http_port == 8123
    await presence.set_read_only(True)
    await meta.bookie_watcher.wait_for(lambda w: "127.0.0.1:3190" in w.readonly_bookies(), 10)
    await presence.close()
    await meta.bookie_watcher.wait_for(lambda w: not w.all_bookies(), 10)

    # Restarted with one ledger dir fewer: refuses, and leaves no registration behind.
    again = BookiePresence(zk_hosts, info, journal, ledgers[:1])
    with pytest.raises(InvalidCookieError):
        await again.start()
    assert await meta.zk.exists("/ledgers/available/127.0.0.1:3190") is None
