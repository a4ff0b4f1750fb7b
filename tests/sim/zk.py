"""A simulated ZooKeeper behind the project's own metadata interfaces.

:class:`SimZooKeeper` keeps ledger metadata as znodes (bytes in BookKeeper's real format, through
``bkmeta.serde``, with versions for compare-and-set), bookie registrations as ephemerals bound to
sessions that expire, and one-shot watches delivered late. Each client reaches it through
:class:`SimLedgerManager` (a ``bkmeta.ledger_manager.LedgerManager``) over a network link: a request
or an answer cut by a partition is a connection loss (``MetadataStoreError``), and a write whose
answer was lost may still have happened. This is the adapter until the meta branch's in-memory
``MetadataStore`` lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bkmeta.ledger_manager import LedgerManager, LedgerWatcher
from bkmeta.model import LedgerMetadata, Versioned
from bkmeta.registration import BookieServiceInfo
from bkmeta.serde import deserialize, serialize
from bkproto.errors import LedgerExistsError, MetadataStoreError, MetadataVersionError, NoSuchLedgerError

from .network import Network
from .trace import Trace

T = TypeVar("T")
ZK = "zk"
CONNECTION_LOSS_S = 2.0  # how long a client waits before it calls a request lost


@dataclass
class _Znode:
    data: bytes
    version: int = 0


@dataclass
class SimZooKeeper:
    network: Network
    trace: Trace
    session_timeout_s: float = 10.0
    ledgers: dict[int, _Znode] = field(default_factory=dict)
    next_ledger_id: int = 1
    registered: dict[str, tuple[int, BookieServiceInfo]] = field(default_factory=dict)  # ephemerals
    sessions: dict[int, bool] = field(default_factory=dict)  # id -> alive
    next_session: int = 1
    ledger_watches: dict[int, list[tuple[str, Callable[[], None]]]] = field(default_factory=dict)
    bookie_listeners: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    ledger_changed: asyncio.Event = field(default_factory=asyncio.Event)  # set on every ledger write

    # -- sessions and registration -------------------------------------------------------------

    def new_session(self) -> int:
        session = self.next_session
        self.next_session += 1
        self.sessions[session] = True
        return session

    def expire(self, session: int, why: str) -> None:
        if not self.sessions.get(session):
            return
        self.sessions[session] = False
        gone = sorted(b for b, (s, _) in self.registered.items() if s == session)
        for bookie_id in gone:
            del self.registered[bookie_id]
        self.trace.event(f"zk session {session} expired ({why}); ephemerals gone: {gone}")
        if gone:
            self._fire_bookie_listeners()

    def expire_later(self, session: int, why: str) -> None:
        self.network.loop.call_later(self.session_timeout_s, self.expire, session, why)

    def register(self, session: int, info: BookieServiceInfo) -> None:
        if not self.sessions.get(session):
            return
        self.registered[info.bookie_id] = (session, info)
        self._fire_bookie_listeners()

    def writable(self) -> dict[str, BookieServiceInfo]:
        return {b: info for b, (_, info) in sorted(self.registered.items())}

    def _fire_bookie_listeners(self) -> None:
        listeners, self.bookie_listeners = self.bookie_listeners, []
        for client, callback in listeners:
            self._notify(client, callback)

    def _notify(self, client: str, callback: Callable[[], None]) -> None:
        """A watch event travels to ``client`` like any message (held while partitioned)."""
        net = self.network
        if not net.reachable(client, ZK):
            net.loop.call_later(1.0, self._notify, client, callback)
            return
        net.loop.call_later(net.profile(ZK, client).delay_s(net.rng), callback)

    async def wait_for_ledger(self, ledger_id: int, predicate: Callable[[LedgerMetadata], bool]) -> None:
        """Until the ledger's metadata satisfies ``predicate`` (scenarios)."""
        while not predicate(deserialize(self.ledgers[ledger_id].data, ledger_id)):
            self.ledger_changed.clear()
            await self.ledger_changed.wait()

    # -- ledger znodes -------------------------------------------------------------------------

    def changed(self, ledger_id: int) -> None:
        self.ledger_changed.set()
        watches = self.ledger_watches.pop(ledger_id, [])
        for client, callback in watches:
            self._notify(client, callback)


class SimLedgerManager(LedgerManager):
    """One client's view of :class:`SimZooKeeper`, with real metadata (de)serialization."""

    def __init__(self, zk: SimZooKeeper, client: str) -> None:
        self._zk = zk
        self._client = client
        self._watchers: dict[int, list[LedgerWatcher]] = {}
        self.closed = False

    async def _rpc(self, what: str, apply: Callable[[], T]) -> T:
        """Send, apply at the server, answer: each leg is cut by a partition (connection loss)."""
        net = self._zk.network
        if self.closed:
            raise MetadataStoreError("metadata client closed")
        if not net.reachable(self._client, ZK):
            await asyncio.sleep(CONNECTION_LOSS_S)
            raise MetadataStoreError(f"{what}: connection loss")
        await asyncio.sleep(net.profile(self._client, ZK).delay_s(net.rng))
        if not net.reachable(self._client, ZK):
            await asyncio.sleep(CONNECTION_LOSS_S)
            raise MetadataStoreError(f"{what}: connection loss")
        net.trace.tick("zk", self._client, what)
        result = apply()
        await asyncio.sleep(net.profile(ZK, self._client).delay_s(net.rng))
        if not net.reachable(self._client, ZK):
            await asyncio.sleep(CONNECTION_LOSS_S)
            raise MetadataStoreError(f"{what}: connection loss (the request may have been applied)")
        return result

    async def generate_ledger_id(self) -> int:
        def apply() -> int:
            ledger_id = self._zk.next_ledger_id
            self._zk.next_ledger_id += 1
            return ledger_id

        return await self._rpc("generate id", apply)

    async def create_ledger_metadata(self, ledger_id: int, md: LedgerMetadata) -> Versioned[LedgerMetadata]:
        def apply() -> Versioned[LedgerMetadata]:
            if ledger_id in self._zk.ledgers:
                raise LedgerExistsError(f"ledger {ledger_id} already exists")
            self._zk.ledgers[ledger_id] = _Znode(serialize(md))
            self._zk.changed(ledger_id)
            return Versioned(md, 0)

        return await self._rpc(f"create L{ledger_id}", apply)

    def _read_now(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        node = self._zk.ledgers.get(ledger_id)
        if node is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata")
        return Versioned(deserialize(node.data, ledger_id), node.version)

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        return await self._rpc(f"read L{ledger_id}", lambda: self._read_now(ledger_id))

    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        def apply() -> Versioned[LedgerMetadata]:
            node = self._zk.ledgers.get(ledger_id)
            if node is None:
                raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata")
            if node.version != expected_version:
                raise MetadataVersionError(
                    f"ledger {ledger_id}: version {node.version}, expected {expected_version}"
                )
            node.data = serialize(md)
            node.version += 1
            self._zk.changed(ledger_id)
            return Versioned(md, node.version)

        return await self._rpc(f"write L{ledger_id}", apply)

    async def remove_ledger_metadata(self, ledger_id: int, version: int = -1) -> None:
        def apply() -> None:
            node = self._zk.ledgers.get(ledger_id)
            if node is None:
                raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata")
            if version != -1 and node.version != version:
                raise MetadataVersionError(f"ledger {ledger_id}: version {node.version}, expected {version}")
            del self._zk.ledgers[ledger_id]
            self._zk.changed(ledger_id)

        await self._rpc(f"remove L{ledger_id}", apply)

    def watch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        callbacks = self._watchers.setdefault(ledger_id, [])
        callbacks.append(callback)
        if len(callbacks) == 1:
            self._arm(ledger_id)
        else:
            self._deliver_current(ledger_id, [callback])

    def _arm(self, ledger_id: int) -> None:
        """Set a one-shot watch and report the current value (ZooKeeper's getData with a watch)."""
        if self.closed or not self._watchers.get(ledger_id):
            return
        self._zk.ledger_watches.setdefault(ledger_id, []).append((self._client, lambda: self._arm(ledger_id)))
        self._deliver_current(ledger_id, list(self._watchers[ledger_id]))

    def _deliver_current(self, ledger_id: int, callbacks: list[LedgerWatcher]) -> None:
        node = self._zk.ledgers.get(ledger_id)
        value = None if node is None else Versioned(deserialize(node.data, ledger_id), node.version)
        for callback in callbacks:
            callback(value)

    def unwatch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        callbacks = self._watchers.get(ledger_id, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            self._watchers.pop(ledger_id, None)

    async def ledger_ranges(self) -> AsyncIterator[list[int]]:  # type: ignore[override]
        ids = await self._rpc("list", lambda: sorted(self._zk.ledgers))
        if ids:
            yield ids

    async def close(self) -> None:
        self.closed = True
        self._watchers.clear()


class SimBookieWatcher:
    """``bkmeta.registration.BookieWatcher``'s read side: the registered bookies as this client
    last heard of them (updated by watch events, which arrive late)."""

    def __init__(self, zk: SimZooKeeper, client: str) -> None:
        self._zk = zk
        self._client = client
        self._view: dict[str, BookieServiceInfo] = {}
        self.closed = False
        self._refresh()

    def _refresh(self) -> None:
        if self.closed:
            return
        self._view = self._zk.writable()
        self._zk.bookie_listeners.append((self._client, self._refresh))

    def writable_bookies(self) -> dict[str, BookieServiceInfo]:
        return dict(self._view)

    def readonly_bookies(self) -> dict[str, BookieServiceInfo]:
        return {}

    def all_bookies(self) -> dict[str, BookieServiceInfo]:
        return dict(self._view)

    async def close(self) -> None:
        self.closed = True


class SimMetadata:
    """What ``ClientContext.metadata`` is used for: the ledger manager and the bookie watcher."""

    def __init__(self, zk: SimZooKeeper, client: str) -> None:
        self.ledger_manager = SimLedgerManager(zk, client)
        self.bookie_watcher = SimBookieWatcher(zk, client)

    async def close(self) -> None:
        await self.bookie_watcher.close()
        await self.ledger_manager.close()


async def retry_metadata(call: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """Retry a metadata read through connection losses (checkers only; never for CAS writes)."""
    for attempt in range(attempts):
        try:
            return await call()
        except MetadataStoreError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


__all__ = ["ZK", "SimBookieWatcher", "SimLedgerManager", "SimMetadata", "SimZooKeeper", "retry_metadata"]
_ = Any
