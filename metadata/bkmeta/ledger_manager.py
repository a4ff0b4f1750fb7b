"""`LedgerManager`: create / read / compare-and-set / delete / watch / iterate ledger metadata.

``LedgerManager`` is the interface the client, the bookie's GC and the shell program against;
``ZkLedgerManager`` stores it in ZooKeeper with BookKeeper's hierarchical layout and v3 format.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from bkmeta.idgen import LedgerIdGenerator
from bkmeta.layout import LEDGER_PREFIX, RESERVED_ZNODES, BadLedgerPathError, ZkLayout
from bkmeta.metadata_cache import DEFAULT_CAPACITY, WatchedMetadataCache
from bkmeta.model import LedgerMetadata, Versioned
from bkmeta.serde import deserialize, serialize
from bkmeta.store import (
    EventType,
    MetadataStore,
    SessionEvent,
    Watcher,
    WatchEvent,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from bkproto.errors import LedgerExistsError, MetadataStoreError, NoSuchLedgerError

log = logging.getLogger(__name__)

LedgerWatcher = Callable[[Versioned[LedgerMetadata] | None], None]


class LedgerManager(abc.ABC):
    """Ledger metadata store. Versions are the CAS tokens: pass back the one you read."""

    @abc.abstractmethod
    async def generate_ledger_id(self) -> int: ...

    @abc.abstractmethod
    async def create_ledger_metadata(self, ledger_id: int, md: LedgerMetadata) -> Versioned[LedgerMetadata]:
        """Store metadata for a new ledger; ``LedgerExistsError`` if the id is taken."""

    @abc.abstractmethod
    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """``NoSuchLedgerError`` if absent."""

    async def read_ledger_metadata_cached(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """Like :meth:`read_ledger_metadata`, but may answer from a cache kept true by watches
        (as fresh as a ZooKeeper read without ``sync``): for opening a ledger to read it, not for
        decisions that need the latest version (those CAS with :meth:`write_ledger_metadata`)."""
        return await self.read_ledger_metadata(ledger_id)

    @abc.abstractmethod
    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set; ``MetadataVersionError`` if someone else wrote since ``expected_version``."""

    @abc.abstractmethod
    async def remove_ledger_metadata(self, ledger_id: int, version: int = -1) -> None:
        """Delete (``version`` -1: whatever the version); ``NoSuchLedgerError`` if absent."""

    @abc.abstractmethod
    def watch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        """Call ``callback`` (on the event loop) with the current metadata once the watch is set
        (so a change between the caller's read and the watch is never missed), then with the new
        metadata on every change, and with ``None`` once the ledger is deleted."""

    @abc.abstractmethod
    def unwatch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None: ...

    @abc.abstractmethod
    def ledger_ranges(self) -> AsyncIterator[list[int]]:
        """Sorted batches of ledger ids, batches in ascending id order (bounded memory for GC)."""

    async def list_ledgers(self) -> list[int]:
        out: list[int] = []
        async for batch in self.ledger_ranges():
            out.extend(batch)
        return out

    async def create_ledger(self, md: LedgerMetadata) -> tuple[int, Versioned[LedgerMetadata]]:
        """Allocate an id and store ``md`` under it (retrying if an old ledger took the id)."""
        for _ in range(10):
            ledger_id = await self.generate_ledger_id()
            try:
                return ledger_id, await self.create_ledger_metadata(ledger_id, md)
            except LedgerExistsError:
                log.warning("generated ledger id %d already exists; trying another", ledger_id)
        raise MetadataStoreError("could not allocate a free ledger id after 10 attempts")

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release watches and resources."""


class ZkLedgerManager(LedgerManager):
    def __init__(
        self, zk: MetadataStore, layout: ZkLayout | None = None, cache_capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self._zk = zk
        self._layout = layout or ZkLayout()
        self._idgen = LedgerIdGenerator(zk, self._layout)
        self._cache = WatchedMetadataCache(zk, self._layout, cache_capacity)
        zk.add_session_listener(self._cache.on_session_event)
        self._watchers: dict[int, list[LedgerWatcher]] = {}
        # Ledgers with a ZooKeeper watch pending. It can outlive its callbacks (unwatch cannot
        # remove a ZooKeeper watch): re-watching then must not stack a second one.
        self._armed: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        zk.add_session_listener(self._on_session_event)

    @property
    def layout(self) -> ZkLayout:
        return self._layout

    async def generate_ledger_id(self) -> int:
        return await self._idgen.generate()

    async def create_ledger_metadata(self, ledger_id: int, md: LedgerMetadata) -> Versioned[LedgerMetadata]:
        path = self._layout.ledger(ledger_id)
        try:
            await self._zk.create(path, serialize(md), makepath=True)
        except ZkNodeExistsError as e:
            raise LedgerExistsError(f"ledger {ledger_id} already exists at {path}") from e
        return Versioned(md, 0)

    @property
    def cache(self) -> WatchedMetadataCache:
        return self._cache

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """From ZooKeeper, without touching the cache (GC and the shell read every ledger: they
        must not fill it, nor set a watch each), except to drop an entry it shows outdated."""
        value = await self._read(ledger_id)
        cached = self._cache.peek(ledger_id)
        if cached is not None and cached.version != value.version:
            self._cache.invalidate(ledger_id)
        return value

    async def read_ledger_metadata_cached(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        cached = self._cache.get(ledger_id)
        if cached is not None:
            return cached
        ticket = self._cache.begin_read(ledger_id)
        if ticket is None:  # the cache is full: a plain read
            return await self._read(ledger_id)
        value: Versioned[LedgerMetadata] | None = None
        try:
            value = await self._read(ledger_id, self._cache.watcher)
        finally:
            self._cache.fill(ledger_id, ticket, value)
        return value

    async def _read(self, ledger_id: int, watch: Watcher | None = None) -> Versioned[LedgerMetadata]:
        path = self._layout.ledger(ledger_id)
        try:
            data, stat = await self._zk.get(path, watch=watch)
        except ZkNoNodeError as e:
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata at {path}") from e
        return Versioned(deserialize(data, ledger_id, path), stat.version)

    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        path = self._layout.ledger(ledger_id)
        # Whatever the outcome (written, or a conflict showing the cache behind), the next cached
        # read goes to ZooKeeper.
        self._cache.invalidate(ledger_id)
        try:
            stat = await self._zk.set(path, serialize(md), expected_version)
        except ZkNoNodeError as e:
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata at {path}") from e
        return Versioned(md, stat.version)

    async def remove_ledger_metadata(self, ledger_id: int, version: int = -1) -> None:
        path = self._layout.ledger(ledger_id)
        self._cache.invalidate(ledger_id)
        try:
            await self._zk.delete(path, version)
        except ZkNoNodeError as e:
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata at {path}") from e

    # -- watches ----------------------------------------------------------------------------------

    def watch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        callbacks = self._watchers.setdefault(ledger_id, [])
        first = not callbacks
        callbacks.append(callback)
        if first and ledger_id not in self._armed:
            self._spawn(self._arm(ledger_id))
        else:
            # The ZooKeeper watch is already set: only this callback needs the current value.
            self._spawn(self._current_value_to(ledger_id, callback))

    def unwatch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        callbacks = self._watchers.get(ledger_id)
        if callbacks and callback in callbacks:
            callbacks.remove(callback)
            if not callbacks:
                del self._watchers[ledger_id]

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _current_value_to(self, ledger_id: int, callback: LedgerWatcher) -> None:
        try:
            current: Versioned[LedgerMetadata] | None = await self.read_ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            current = None
        except MetadataStoreError:
            log.exception("cannot read ledger %d for a new watcher", ledger_id)
            return
        if callback in self._watchers.get(ledger_id, []):
            callback(current)

    async def _arm(self, ledger_id: int) -> None:
        """(Re-)read the ledger with a one-shot watch and tell the callbacks what it holds."""
        if self._closed or ledger_id not in self._watchers or ledger_id in self._armed:
            return
        path = self._layout.ledger(ledger_id)
        self._armed.add(ledger_id)

        def on_event(event: WatchEvent) -> None:
            if event.type == EventType.NONE:
                return  # connection-state notification, not a change
            self._armed.discard(ledger_id)
            self._spawn(self._arm(ledger_id))

        watcher = self._zk.wrap_watcher(on_event)
        result: Versioned[LedgerMetadata] | None
        try:
            data, stat = await self._zk.get(path, watch=watcher)
            result = Versioned(deserialize(data, ledger_id, path), stat.version)
        except ZkNoNodeError:
            self._armed.discard(ledger_id)  # ZooKeeper sets no data watch on a missing node
            result = None
        except MetadataStoreError:
            self._armed.discard(ledger_id)
            log.exception("watch on ledger %d failed; it will be re-armed on reconnect", ledger_id)
            return
        if result is None:
            callbacks = self._watchers.pop(ledger_id, [])
        else:
            callbacks = list(self._watchers.get(ledger_id, []))
        for cb in callbacks:
            try:
                cb(result)
            except Exception:
                log.exception("ledger %d watcher %r failed", ledger_id, cb)

    def _on_session_event(self, event: SessionEvent) -> None:
        # Watches die with an expired session: re-arm every watched ledger and report its state,
        # since changes may have been missed meanwhile.
        if event == SessionEvent.NEW_SESSION:
            self._armed.clear()
            for ledger_id in list(self._watchers):
                self._spawn(self._arm(ledger_id))

    # -- iteration --------------------------------------------------------------------------------

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._zk.get_children(path)
        except ZkNoNodeError:
            return []

    async def ledger_ranges(self) -> AsyncIterator[list[int]]:
        root = self._layout.root.rstrip("/")
        top = sorted(c for c in await self._children(root or "/") if c not in RESERVED_ZNODES and c.isdigit())
        # Short layout (2-digit top dirs) holds ids < 2^31-1, long layout (3-digit) the rest: all
        # short ranges first, then long ones, gives ascending id order.
        for width, depth in ((2, 3), (3, 5)):
            for name in (c for c in top if len(c) == width):
                async for batch in self._walk(f"{root}/{name}", [name], depth):
                    yield batch

    async def _walk(self, path: str, parts: list[str], depth: int) -> AsyncIterator[list[int]]:
        children = sorted(await self._children(path))
        if len(parts) == depth - 1:
            ids: list[int] = []
            for leaf in children:
                if not leaf.startswith(LEDGER_PREFIX):
                    continue
                try:
                    ids.append(self._layout.parse_ledger(f"{path}/{leaf}"))
                except BadLedgerPathError:
                    log.warning("ignoring unexpected znode %s/%s", path, leaf)
            if ids:
                yield sorted(ids)
            return
        for child in children:
            if child.isdigit():
                async for batch in self._walk(f"{path}/{child}", [*parts, child], depth):
                    yield batch

    async def close(self) -> None:
        self._closed = True
        self._watchers.clear()
        self._cache.close()
        self._zk.remove_session_listener(self._cache.on_session_event)
        self._zk.remove_session_listener(self._on_session_event)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
