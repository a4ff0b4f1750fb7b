"""`MetadataStore`: the ZooKeeper calls bkmeta makes, as a Protocol.

The ledger manager, the id generator, bookie registration and the bookie watcher, cookies,
cluster set-up and the replication switches program against this, not against kazoo. Two
implementations keep ZooKeeper's semantics:

* :class:`bkmeta.zk.ZkClient`, a real session through kazoo (production, integration tests);
* :class:`bkmeta.memory_store.MemorySession`, a session on an in-memory ZooKeeper driven by the
  event loop alone (unit tests, the deterministic simulation).

The semantics both keep, which callers rely on:

* every znode has a data ``version`` that each ``set`` increments; a write given another version
  than the current one fails with :class:`ZkBadVersionError` (-1: any version);
* ``create`` fails with :class:`ZkNodeExistsError` on an existing path and :class:`ZkNoNodeError`
  without its parent (unless ``makepath``); ``delete`` of a znode with children fails with
  :class:`ZkNotEmptyError`; a sequential create appends the parent's 10-digit counter;
* an ephemeral znode belongs to the session that created it and goes when that session expires
  or closes;
* a watch fires once, on the event loop (after ``wrap_watcher``), for the first change after it
  was set; a data watch comes from ``get``/``exists`` (``exists`` sets one on a missing znode
  too, ``get`` does not), a child watch from ``get_children``;
* session listeners hear :class:`SessionEvent` on the event loop; after ``EXPIRED`` the session's
  ephemerals and watches are gone, and ``NEW_SESSION`` says a new session is up (callers
  re-create ephemerals and re-arm watches then).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable
from typing import ClassVar, Protocol

from bkproto.errors import MetadataStoreError, MetadataVersionError


class ZkNoNodeError(MetadataStoreError):
    """The znode does not exist (callers narrow this to e.g. ``NoSuchLedgerError``)."""

    retriable: ClassVar[bool] = False
    attempts: int = 1  # how many tries the call took: > 1 means an earlier try may have applied


class ZkNodeExistsError(MetadataStoreError):
    """The znode already exists (callers narrow this to e.g. ``LedgerExistsError``)."""

    retriable: ClassVar[bool] = False
    attempts: int = 1


class ZkBadVersionError(MetadataVersionError):
    """A versioned write found another version (``MetadataVersionError`` with the try count)."""

    attempts: int = 1


class ZkNotEmptyError(MetadataStoreError):
    """The znode has children and cannot be deleted non-recursively."""

    retriable: ClassVar[bool] = False


class SessionEvent(enum.Enum):
    """What a session listener is told (always on the event loop's thread)."""

    DISCONNECTED = "disconnected"  # SUSPENDED: the session may survive; ephemerals still exist
    RECONNECTED = "reconnected"  # same session back
    EXPIRED = "expired"  # LOST: ephemerals are gone
    NEW_SESSION = "new_session"  # connected again after an expiry: re-create ephemerals now


class EventType:
    """What a watch event says happened (the values of kazoo's ``EventType``)."""

    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"
    NONE = "NONE"  # a connection-state notification, not a change


class NodeStat(Protocol):
    """The parts of a znode's stat that callers read (kazoo's ``ZnodeStat`` has them)."""

    @property
    def version(self) -> int: ...

    @property
    def ephemeralOwner(self) -> int: ...  # ZooKeeper's names

    @property
    def ctime(self) -> int: ...  # creation time, milliseconds

    @property
    def numChildren(self) -> int: ...


class WatchEvent(Protocol):
    """What a watcher is called with (kazoo's ``WatchedEvent`` has these)."""

    @property
    def type(self) -> str: ...  # an ``EventType`` value

    @property
    def state(self) -> str: ...

    @property
    def path(self) -> str: ...


SessionListener = Callable[[SessionEvent], None]
Watcher = Callable[[WatchEvent], None]
# One operation of ``multi``: (kind, path, data, version), kind one of create/set/delete/check, or
# ``create_ephemeral_sequential`` (the path is a prefix; ZooKeeper appends the parent's counter).
TransactionOp = tuple[str, str, bytes, int]
CREATE_EPHEMERAL_SEQUENTIAL = "create_ephemeral_sequential"


class MetadataStore(Protocol):
    """One session on a ZooKeeper-like store (see the module docstring for the semantics)."""

    @property
    def connected(self) -> bool: ...

    @property
    def session_id(self) -> int | None: ...

    @property
    def session_timeout_s(self) -> float: ...

    def add_session_listener(self, listener: SessionListener) -> None: ...

    def remove_session_listener(self, listener: SessionListener) -> None: ...

    def wrap_watcher(self, watcher: Watcher) -> Watcher:
        """The watcher to pass to ``get``/``exists``/``get_children``: it runs ``watcher`` on
        the event loop."""
        ...

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, NodeStat]: ...

    async def exists(self, path: str, watch: Watcher | None = None) -> NodeStat | None: ...

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]: ...

    async def sync(self, path: str) -> None:
        """Reads after this see every write committed before it."""
        ...

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """The path created (with its sequence suffix when ``sequence``)."""
        ...

    async def set(self, path: str, value: bytes, version: int = -1) -> NodeStat: ...

    async def delete(self, path: str, version: int = -1) -> None: ...

    async def delete_own_ephemeral(self, path: str) -> bool:
        """Delete ``path`` only if it is an ephemeral of this session; whether it was."""
        ...

    async def delete_recursive(self, path: str) -> None: ...

    async def ensure_path(self, path: str) -> None: ...

    async def multi(self, ops: list[TransactionOp]) -> list[str]:
        """All of ``ops`` or none; the first failing op's error is raised. Returns, per op, the
        path created (for the create kinds) or ``""``."""
        ...

    def delete_nowait(self, path: str) -> None:
        """Delete in the background; a failure is only logged."""
        ...

    async def close(self) -> None:
        """End the session (its ephemerals go at once). Idempotent."""
        ...


class CompositeOperations:
    """The ``MetadataStore`` operations made of the others, written once for every store (a
    mixin of ``ZkClient`` and ``MemorySession``)."""

    async def delete_own_ephemeral(self: MetadataStore, path: str) -> bool:
        """Delete ``path`` if it is an ephemeral of this session (never another session's node,
        say a successor's after this session expired); returns whether it was deleted."""
        try:
            _, stat = await self.get(path)
            if stat.ephemeralOwner != self.session_id:
                return False
            await self.delete(path, stat.version)
        except ZkNoNodeError:
            return False
        return True

    async def delete_recursive(self: MetadataStore, path: str) -> None:
        """Delete ``path`` and everything under it (children first); a missing node is fine."""
        try:
            children = await self.get_children(path)
        except ZkNoNodeError:
            return
        await asyncio.gather(*(self.delete_recursive(f"{path.rstrip('/')}/{c}") for c in children))
        with contextlib.suppress(ZkNoNodeError):
            await self.delete(path)

    async def ensure_path(self: MetadataStore, path: str) -> None:
        """Create ``path`` and its missing ancestors (persistent, empty); existing ones are fine."""
        current = ""
        for part in (p for p in path.split("/") if p):
            current += "/" + part
            if await self.exists(current) is None:
                with contextlib.suppress(ZkNodeExistsError):
                    await self.create(current)
