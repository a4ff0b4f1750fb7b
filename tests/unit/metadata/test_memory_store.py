"""The in-memory ZooKeeper (``bkmeta.memory_store``): the ZooKeeper semantics of
tests/support/store_contract.py (which the real ZooKeeper passes too), then what only the
in-memory one offers: partitions that end in expiry, delayed watches, the operation hook."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.support.memory_zk import settle
from tests.support.store_contract import CHECKS, Check, StoreHarness

from bkmeta.memory_store import MemorySession, MemoryZooKeeper
from bkmeta.store import EventType, MetadataStore, SessionEvent, WatchEvent
from bkproto.errors import MetadataStoreError


@pytest.fixture
async def harness() -> AsyncIterator[StoreHarness]:
    server = MemoryZooKeeper()
    sessions: list[MemorySession] = []

    async def open_session() -> MetadataStore:
        sessions.append(server.session())
        return sessions[-1]

    async def expire(store: MetadataStore) -> None:
        assert isinstance(store, MemorySession)
        store.expire()
        await settle()

    yield StoreHarness(open_session, expire)
    for session in sessions:
        await session.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_zookeeper_semantics(harness: StoreHarness, check: Check) -> None:
    await check(harness)


async def test_a_partition_longer_than_the_session_timeout_expires_the_session() -> None:
    server = MemoryZooKeeper()
    zk, observer = server.session(session_timeout_s=0.2), server.session()
    heard: list[SessionEvent] = []
    zk.add_session_listener(heard.append)
    await zk.create("/eph", ephemeral=True)
    zk.disconnect()
    with pytest.raises(MetadataStoreError):
        await zk.get("/eph")  # a connection loss while partitioned
    zk.reconnect()  # back in time: same session, ephemeral kept
    await settle()
    assert heard == [SessionEvent.DISCONNECTED, SessionEvent.RECONNECTED]
    assert await observer.exists("/eph") is not None
    gone = asyncio.Event()

    def on_delete(event: WatchEvent) -> None:
        assert event.type == EventType.DELETED
        gone.set()

    await observer.exists("/eph", watch=on_delete)
    zk.disconnect()
    await gone.wait()  # the server expires the session once its timeout passed
    assert heard[2:] == [SessionEvent.DISCONNECTED]  # a partitioned client cannot know yet
    zk.reconnect()
    await settle()
    assert heard[2:] == [SessionEvent.DISCONNECTED, SessionEvent.EXPIRED, SessionEvent.NEW_SESSION]


async def test_the_watch_delay_hook_postpones_delivery() -> None:
    delays = {"/slow": 0.05}
    server = MemoryZooKeeper(watch_delay=lambda event: delays.get(event.path, 0.0))
    zk = server.session()
    seen: list[tuple[str, str]] = []
    both = asyncio.Event()

    def on_event(event: WatchEvent) -> None:
        seen.append((event.path, event.type))
        if len(seen) == 2:
            both.set()

    await zk.exists("/slow", watch=on_event)
    await zk.exists("/fast", watch=on_event)
    await zk.create("/slow")
    await zk.create("/fast")
    await both.wait()
    # created first, told last: its event waited out the delay
    assert seen == [("/fast", EventType.CREATED), ("/slow", EventType.CREATED)]


async def test_the_operation_hook_sees_every_call_and_can_fail_it() -> None:
    calls: list[tuple[str, str]] = []

    async def hook(session_id: int, op: str, path: str) -> None:
        calls.append((op, path))
        if path == "/refused":
            raise MetadataStoreError("connection loss")

    server = MemoryZooKeeper(before_op=hook)
    zk = server.session()
    await zk.create("/ok")
    with pytest.raises(MetadataStoreError):
        await zk.create("/refused")
    assert server.paths() == ["/", "/ok"]  # a failure before the server: nothing applied
    assert calls == [("create", "/ok"), ("create", "/refused")]


async def test_sequence_numbers_wrap_like_a_java_int() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    await zk.create("/q")
    server.set_sequence("/q", 2**31 - 1)
    assert await zk.create("/q/n-", sequence=True) == "/q/n-2147483647"
    assert await zk.create("/q/n-", sequence=True) == "/q/n--2147483648"


async def test_a_closed_session_refuses_operations_and_its_background_deletes_stop() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    await zk.create("/x")
    await zk.close()
    await zk.close()  # idempotent
    with pytest.raises(MetadataStoreError):
        await zk.get("/x")
    assert not zk.connected


async def test_an_expiry_decided_by_the_server_reaches_a_connected_client_at_once() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    heard: list[SessionEvent] = []
    zk.add_session_listener(heard.append)
    old = zk.session_id
    await zk.create("/mine", ephemeral=True)
    server.expire_session(old)
    assert zk.session_id != old and server.ephemerals() == []
    created = await zk.create("/mine", ephemeral=True)  # the new session's, not the dead one's
    assert server.ephemerals(zk.session_id) == [created]
    await settle()
    assert heard == [SessionEvent.EXPIRED, SessionEvent.NEW_SESSION]


async def test_a_disconnected_client_learns_of_its_expiry_when_it_reconnects() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    heard: list[SessionEvent] = []
    zk.add_session_listener(heard.append)
    zk.disconnect()
    zk.expire()
    await settle()
    assert heard == [SessionEvent.DISCONNECTED]
    zk.reconnect()
    await settle()
    assert heard == [SessionEvent.DISCONNECTED, SessionEvent.EXPIRED, SessionEvent.NEW_SESSION]
