"""ZooKeeper's semantics that bkmeta relies on, as checks over any ``bkmeta.store.MetadataStore``.

The same checks run against a real ZooKeeper through ``ZkClient`` (tests/integration/
test_metadata_store_contract.py) and against the in-memory one (tests/unit/metadata/
test_memory_store.py): what passes on both is what the simulation may rely on.

A check gets a :class:`StoreHarness`: ``open()`` a new session on the same store (sessions
are closed by the harness), ``expire(session)`` expires one and returns once the session's
listeners heard ``NEW_SESSION``. Watch events are awaited in order, with a bound (ZooKeeper
delivers one session's events in order, so a later event proves an earlier one did not come).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from bkmeta.store import (
    CREATE_EPHEMERAL_SEQUENTIAL,
    EventType,
    MetadataStore,
    SessionEvent,
    TransactionOp,
    WatchEvent,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotEmptyError,
)
from bkproto.errors import MetadataStoreError, MetadataVersionError

_WAIT_S = 10.0


@dataclass
class StoreHarness:
    open: Callable[[], Awaitable[MetadataStore]]
    expire: Callable[[MetadataStore], Awaitable[None]]


@dataclass
class Events:
    """Watch events as they come; ``watcher(tag)`` makes a watcher that tags its events."""

    store: MetadataStore
    queue: asyncio.Queue[tuple[str, str, str]] = field(default_factory=asyncio.Queue)

    def watcher(self, tag: str) -> Callable[[WatchEvent], None]:
        def on_event(event: WatchEvent) -> None:
            self.queue.put_nowait((tag, event.type, event.path))

        return self.store.wrap_watcher(on_event)

    async def next(self) -> tuple[str, str, str]:
        return await asyncio.wait_for(self.queue.get(), _WAIT_S)


async def versions_and_cas(h: StoreHarness) -> None:
    zk = await h.open()
    assert await zk.create("/v", b"a") == "/v"
    data, stat = await zk.get("/v")
    assert (data, stat.version) == (b"a", 0)
    assert (await zk.set("/v", b"b", 0)).version == 1
    with pytest.raises(ZkBadVersionError):
        await zk.set("/v", b"c", 0)
    assert isinstance(ZkBadVersionError(), MetadataVersionError)
    assert (await zk.set("/v", b"c")).version == 2  # -1: whatever the version
    with pytest.raises(ZkBadVersionError):
        await zk.delete("/v", 1)
    await zk.delete("/v", 2)
    assert await zk.exists("/v") is None


async def node_errors(h: StoreHarness) -> None:
    zk = await h.open()
    await zk.create("/e")
    with pytest.raises(ZkNodeExistsError):
        await zk.create("/e")
    with pytest.raises(ZkNoNodeError):
        await zk.create("/missing/child")
    assert await zk.create("/deep/er/node", b"x", makepath=True) == "/deep/er/node"
    assert await zk.get_children("/deep") == ["er"]
    with pytest.raises(ZkNotEmptyError):
        await zk.delete("/deep")
    with pytest.raises(ZkNoNodeError):
        await zk.get("/nothing")
    with pytest.raises(ZkNoNodeError):
        await zk.set("/nothing", b"")
    with pytest.raises(ZkNoNodeError):
        await zk.get_children("/nothing")
    await zk.delete_recursive("/deep")
    assert await zk.exists("/deep") is None
    await zk.ensure_path("/a/b/c")
    await zk.ensure_path("/a/b/c")  # idempotent
    assert (await zk.exists("/a/b/c")) is not None


async def sequential_names_count_creates(h: StoreHarness) -> None:
    zk = await h.open()
    await zk.create("/s")
    first = await zk.create("/s/ID-", sequence=True)
    await zk.delete(first)
    second = await zk.create("/s/ID-", sequence=True)
    await zk.create("/s/plain")  # a plain create counts too
    third = await zk.create("/s/ID-", b"", ephemeral=True, sequence=True)
    assert (first, second, third) == ("/s/ID-0000000000", "/s/ID-0000000001", "/s/ID-0000000003")


async def ephemerals_belong_to_their_session(h: StoreHarness) -> None:
    owner, other = await h.open(), await h.open()
    await owner.create("/eph", b"x", ephemeral=True)
    _, stat = await other.get("/eph")
    assert stat.ephemeralOwner == owner.session_id != other.session_id
    with pytest.raises(MetadataStoreError):
        await owner.create("/eph/child")  # ephemerals have no children
    assert not await other.delete_own_ephemeral("/eph")
    await owner.close()
    assert await other.exists("/eph") is None


async def expiry_takes_ephemerals_and_tells_listeners(h: StoreHarness) -> None:
    zk, observer = await h.open(), await h.open()
    heard: list[SessionEvent] = []
    zk.add_session_listener(heard.append)
    await zk.create("/gone", ephemeral=True)
    old = zk.session_id
    await h.expire(zk)
    assert heard[-2:] == [SessionEvent.EXPIRED, SessionEvent.NEW_SESSION]
    assert zk.session_id != old
    assert await observer.exists("/gone") is None
    await zk.create("/gone", ephemeral=True)  # the new session works
    assert (await observer.get("/gone"))[1].ephemeralOwner == zk.session_id


async def watches_fire_once(h: StoreHarness) -> None:
    zk, writer = await h.open(), await h.open()
    events = Events(zk)
    await writer.create("/w", b"0")
    data_watch = events.watcher("data")
    await zk.get("/w", watch=data_watch)
    await zk.get("/w", watch=data_watch)  # the same watcher twice: told once
    await writer.set("/w", b"1")
    assert await events.next() == ("data", EventType.CHANGED, "/w")
    await writer.set("/w", b"2")  # the watch was used up: no event
    await zk.exists("/later", watch=events.watcher("exists"))
    await writer.create("/later")
    assert await events.next() == ("exists", EventType.CREATED, "/later")


async def each_wrapped_watcher_is_a_watch_of_its_own(h: StoreHarness) -> None:
    zk, writer = await h.open(), await h.open()
    events = Events(zk)
    await writer.create("/twice")

    def callback(event: WatchEvent) -> None:
        events.queue.put_nowait(("callback", event.type, event.path))

    for _ in range(2):  # two wrappings of one callback are two watches
        await zk.get("/twice", watch=zk.wrap_watcher(callback))
    await writer.set("/twice", b"x")
    assert [await events.next(), await events.next()] == [("callback", EventType.CHANGED, "/twice")] * 2


async def watches_on_missing_nodes_and_children(h: StoreHarness) -> None:
    zk, writer = await h.open(), await h.open()
    events = Events(zk)
    with pytest.raises(ZkNoNodeError):
        await zk.get("/p", watch=events.watcher("get-missing"))  # sets no watch
    assert await zk.exists("/p", watch=events.watcher("exists")) is None
    await writer.create("/p")
    assert await events.next() == ("exists", EventType.CREATED, "/p")
    await zk.get_children("/p", watch=events.watcher("children"))
    await writer.create("/p/c")
    assert await events.next() == ("children", EventType.CHILD, "/p")
    await zk.get("/p/c", watch=events.watcher("data"))
    await zk.get_children("/p/c", watch=events.watcher("kids"))
    await zk.get_children("/p", watch=events.watcher("parent"))
    await writer.delete("/p/c")
    got = {await events.next() for _ in range(3)}
    assert got == {
        ("data", EventType.DELETED, "/p/c"),
        ("kids", EventType.DELETED, "/p/c"),
        ("parent", EventType.CHILD, "/p"),
    }


async def multi_is_all_or_nothing(h: StoreHarness) -> None:
    zk = await h.open()
    await zk.create("/m", b"0")
    with pytest.raises(ZkNodeExistsError):
        await zk.multi([("set", "/m", b"1", 0), ("create", "/m/a", b"", -1), ("create", "/m", b"", -1)])
    assert (await zk.get("/m"))[1].version == 0 and await zk.exists("/m/a") is None
    with pytest.raises(MetadataVersionError):
        await zk.multi([("create", "/m/a", b"", -1), ("check", "/m", b"", 5)])
    assert await zk.exists("/m/a") is None
    await zk.multi([("set", "/m", b"1", 0), ("create", "/m/a", b"x", -1), ("delete", "/m/a", b"", -1)])
    assert (await zk.get("/m"))[1].version == 1 and await zk.get_children("/m") == []


async def multi_sequential_creates_take_consecutive_numbers(h: StoreHarness) -> None:
    zk, other = await h.open(), await h.open()
    await zk.create("/q")
    await other.create("/q/ID-", b"", ephemeral=True, sequence=True)  # another client's id
    ids: list[TransactionOp] = [(CREATE_EPHEMERAL_SEQUENTIAL, "/q/ID-", b"", -1)] * 3
    created = await zk.multi([*ids, ("create", "/q/x", b"", -1)])
    assert created == ["/q/ID-0000000001", "/q/ID-0000000002", "/q/ID-0000000003", "/q/x"]
    assert (await zk.get("/q/ID-0000000002"))[1].ephemeralOwner == zk.session_id
    assert await other.create("/q/ID-", b"", ephemeral=True, sequence=True) == "/q/ID-0000000005"


Check = Callable[[StoreHarness], Awaitable[None]]

CHECKS: list[Check] = [
    versions_and_cas,
    node_errors,
    sequential_names_count_creates,
    ephemerals_belong_to_their_session,
    expiry_takes_ephemerals_and_tells_listeners,
    watches_fire_once,
    each_wrapped_watcher_is_a_watch_of_its_own,
    watches_on_missing_nodes_and_children,
    multi_is_all_or_nothing,
    multi_sequential_creates_take_consecutive_numbers,
]
