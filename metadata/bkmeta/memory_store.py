"""An in-memory ZooKeeper with ZooKeeper's semantics, driven by the event loop alone.

:class:`MemoryZooKeeper` is the server (znodes, sessions, watches); :class:`MemorySession` is one
client session on it and a :class:`bkmeta.store.MetadataStore`, so the ledger manager, bookie
registration and the rest of bkmeta run over it unchanged. It exists for unit tests and for the
deterministic simulation: no threads, no wall clock (times are the event loop's, which a
simulation makes virtual), no randomness. What it keeps of ZooKeeper (the checks of
tests/support/store_contract.py, which a real ZooKeeper passes too):

* data versions that every ``set`` increments, ``ZkBadVersionError`` on a CAS mismatch;
  ``ZkNodeExistsError``, ``ZkNoNodeError`` (a missing parent too), ``ZkNotEmptyError``;
  ephemerals may have no children;
* sequential names from the parent's count of child creates (deletes do not give numbers back),
  10 digits, wrapping at 2^31 like ZooKeeper's signed counter;
* ephemerals owned by a session, deleted (with their watches fired) when it closes or expires; a
  disconnected session expires after its timeout unless it reconnects first;
* one-shot watches: ``get`` sets a data watch on an existing znode only, ``exists`` on a missing
  one too, ``get_children`` a child watch; a create fires the data watches of the path and the
  child watches of the parent, a delete both of the path and the parent's child watches, a set
  the data watches. One watcher object (what ``wrap_watcher`` returned: a new one per call, as
  with kazoo) is told once per path, however often it was set;
* ``multi``: all operations or none, watches fired only when it applied.

Hooks for a test or a simulation: ``before_op(session_id, op, path)`` is awaited before every
operation and may sleep (latency), wait, or raise (a fault: raise ``MetadataStoreError`` for a
connection loss); ``watch_delay(event)`` gives the seconds before a watch event is delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bkmeta.store import (
    CREATE_EPHEMERAL_SEQUENTIAL,
    CompositeOperations,
    EventType,
    MetadataStore,
    SessionEvent,
    SessionListener,
    TransactionOp,
    Watcher,
    WatchEvent,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotEmptyError,
)
from bkproto.errors import MetadataStoreError, MetadataVersionError

log = logging.getLogger(__name__)

BeforeOp = Callable[[int, str, str], Awaitable[None]]
WatchDelay = Callable[[WatchEvent], float]

# What a write does, for multi to take back if a later operation fails; and the watch events
# (kind, path) it causes, fired only once the whole write applied.
_Undo = list[Callable[[], None]]
_Events = list[tuple[str, str]]

_FIRST_SESSION_ID = 0x1000


@dataclass(frozen=True)
class MemoryStat:
    """A znode's stat, with kazoo's ``ZnodeStat`` field names."""

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeralOwner: int
    dataLength: int
    numChildren: int
    pzxid: int


@dataclass(frozen=True)
class MemoryWatchEvent:
    type: str
    state: str
    path: str


@dataclass
class _Node:
    data: bytes
    czxid: int
    ctime: int
    ephemeral_owner: int = 0
    mzxid: int = 0
    mtime: int = 0
    version: int = 0
    cversion: int = 0
    pzxid: int = 0
    creates: int = 0  # child creates so far: the next sequence number
    children: set[str] = field(default_factory=set)

    def stat(self) -> MemoryStat:
        return MemoryStat(
            self.czxid, self.mzxid, self.ctime, self.mtime, self.version, self.cversion, 0,
            self.ephemeral_owner, len(self.data), len(self.children), self.pzxid,
        )


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and (path.endswith("/") or "//" in path)):
        raise MetadataStoreError(f"invalid znode path {path!r}")


def _sequence_suffix(creates: int) -> str:
    signed = (creates + 2**31) % 2**32 - 2**31  # ZooKeeper's counter is a Java int
    return f"{signed:010d}"


class MemoryZooKeeper:
    """The server side: every session created here shares its znodes."""

    def __init__(
        self,
        *,
        before_op: BeforeOp | None = None,
        watch_delay: WatchDelay | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.before_op = before_op
        self.watch_delay = watch_delay
        self._now_ms = now_ms
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
        self._zxid = 0
        self._next_session = _FIRST_SESSION_ID
        self._live: dict[int, MemorySession] = {}  # session id -> the client holding it
        # path -> watcher -> session that set it (a dict keeps the order they were set in)
        self._data_watches: dict[str, dict[Watcher, int]] = {}
        self._child_watches: dict[str, dict[Watcher, int]] = {}

    def session(self, session_timeout_s: float = 10.0) -> MemorySession:
        """A new connected session."""
        return MemorySession(self, session_timeout_s)

    def set_sequence(self, path: str, creates: int) -> None:
        """Start ``path``'s sequence counter at ``creates`` (a test aid: ids near overflow)."""
        self._node(path).creates = creates

    def paths(self) -> list[str]:
        """Every znode path, sorted (for assertions)."""
        return sorted(self._nodes)

    def ephemerals(self, session_id: int | None = None) -> list[str]:
        """The ephemeral znodes (of ``session_id``, or of every session), sorted."""
        return sorted(
            p for p, n in self._nodes.items()
            if n.ephemeral_owner and session_id in (None, n.ephemeral_owner)
        )

    # -- sessions ---------------------------------------------------------------------------------

    def _open_session(self, client: MemorySession) -> int:
        sid = self._next_session
        self._next_session += 1
        self._live[sid] = client
        return sid

    def is_live(self, session_id: int) -> bool:
        return session_id in self._live

    def expire_session(self, session_id: int) -> None:
        """End a session as ZooKeeper does at expiry or close: its ephemerals go, their watches
        fire, and the watches it had set are dropped. A client still connected with it hears
        ``EXPIRED`` and gets a new session, as kazoo does."""
        client = self._live.pop(session_id, None)
        if client is None:
            return
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                watchers = table[path]
                for watcher in [w for w, sid in watchers.items() if sid == session_id]:
                    del watchers[watcher]
                if not watchers:
                    del table[path]
        owned = sorted((p for p, n in self._nodes.items() if n.ephemeral_owner == session_id), reverse=True)
        events: _Events = []
        for path in owned:
            self._delete(path, -1, [], events)
        self._fire(events)
        if client.connected:
            client._renew()

    # -- reads ------------------------------------------------------------------------------------

    def _node(self, path: str) -> _Node:
        _check_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise ZkNoNodeError(f"{path}: no such znode")
        return node

    def _watch(self, table: dict[str, dict[Watcher, int]], path: str, watch: Watcher, sid: int) -> None:
        table.setdefault(path, {})[watch] = sid

    def get(self, sid: int, path: str, watch: Watcher | None) -> tuple[bytes, MemoryStat]:
        node = self._node(path)  # ZooKeeper sets no watch when the znode is missing
        if watch is not None:
            self._watch(self._data_watches, path, watch, sid)
        return node.data, node.stat()

    def exists(self, sid: int, path: str, watch: Watcher | None) -> MemoryStat | None:
        _check_path(path)
        if watch is not None:
            self._watch(self._data_watches, path, watch, sid)
        node = self._nodes.get(path)
        return node.stat() if node is not None else None

    def get_children(self, sid: int, path: str, watch: Watcher | None) -> list[str]:
        node = self._node(path)
        if watch is not None:
            self._watch(self._child_watches, path, watch, sid)
        return sorted(node.children)

    # -- writes: each records how to undo itself (for multi) and the watch events it causes -----

    def _tick(self) -> tuple[int, int]:
        self._zxid += 1
        now = self._now_ms() if self._now_ms is not None else int(asyncio.get_running_loop().time() * 1000)
        return self._zxid, now

    def _create(
        self,
        sid: int,
        path: str,
        value: bytes,
        ephemeral: bool,
        sequence: bool,
        undo: _Undo,
        events: _Events,
    ) -> str:
        _check_path(path if not sequence else path + "0")
        if path == "/":
            raise ZkNodeExistsError("/: znode already exists")
        parent_path = _parent(path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise ZkNoNodeError(f"create {path}: no parent {parent_path}")
        if parent.ephemeral_owner:
            raise MetadataStoreError(f"create {path}: ephemeral {parent_path} cannot have children")
        if sequence:
            path += _sequence_suffix(parent.creates)
        if path in self._nodes:
            raise ZkNodeExistsError(f"create {path}: znode already exists")
        zxid, now = self._tick()
        name = path.rsplit("/", 1)[1]
        self._nodes[path] = _Node(value, zxid, now, sid if ephemeral else 0, zxid, now, pzxid=zxid)
        parent.children.add(name)
        saved = (parent.creates, parent.cversion, parent.pzxid)
        parent.creates += 1
        parent.cversion += 1
        parent.pzxid = zxid

        def undo_create() -> None:
            del self._nodes[path]
            parent.children.discard(name)
            parent.creates, parent.cversion, parent.pzxid = saved

        undo.append(undo_create)
        events += [(EventType.CREATED, path), (EventType.CHILD, parent_path)]
        return path

    def _set(self, path: str, value: bytes, version: int, undo: _Undo, events: _Events) -> MemoryStat:
        node = self._node(path)
        if version not in (-1, node.version):
            raise ZkBadVersionError(f"set {path}: znode is at version {node.version}, not {version}")
        saved = (node.data, node.version, node.mzxid, node.mtime)
        node.mzxid, node.mtime = self._tick()
        node.data = value
        node.version += 1

        def undo_set() -> None:
            node.data, node.version, node.mzxid, node.mtime = saved

        undo.append(undo_set)
        events.append((EventType.CHANGED, path))
        return node.stat()

    def _delete(self, path: str, version: int, undo: _Undo, events: _Events) -> None:
        node = self._node(path)
        if path == "/":
            raise MetadataStoreError("the root znode cannot be deleted")
        if version not in (-1, node.version):
            raise ZkBadVersionError(f"delete {path}: znode is at version {node.version}, not {version}")
        if node.children:
            raise ZkNotEmptyError(f"delete {path}: znode has children")
        parent_path = _parent(path)
        parent = self._nodes[parent_path]
        name = path.rsplit("/", 1)[1]
        zxid, _ = self._tick()
        del self._nodes[path]
        parent.children.discard(name)
        saved = (parent.cversion, parent.pzxid)
        parent.cversion += 1
        parent.pzxid = zxid

        def undo_delete() -> None:
            self._nodes[path] = node
            parent.children.add(name)
            parent.cversion, parent.pzxid = saved

        undo.append(undo_delete)
        events += [(EventType.DELETED, path), (EventType.CHILD, parent_path)]

    def create(
        self, sid: int, path: str, value: bytes, ephemeral: bool, sequence: bool, makepath: bool
    ) -> str:
        events: _Events = []
        if makepath:
            parts = [p for p in _parent(path).split("/") if p]
            for i in range(1, len(parts) + 1):
                ancestor = "/" + "/".join(parts[:i])
                if ancestor not in self._nodes:
                    self._create(sid, ancestor, b"", False, False, [], events)
        try:
            return self._create(sid, path, value, ephemeral, sequence, [], events)
        finally:
            self._fire(events)

    def set(self, path: str, value: bytes, version: int) -> MemoryStat:
        events: _Events = []
        stat = self._set(path, value, version, [], events)
        self._fire(events)
        return stat

    def delete(self, path: str, version: int) -> None:
        events: _Events = []
        self._delete(path, version, [], events)
        self._fire(events)

    def multi(self, sid: int, ops: list[TransactionOp]) -> list[str]:
        undo: _Undo = []
        events: _Events = []
        created: list[str] = []
        try:
            for kind, path, data, version in ops:
                created.append("")
                if kind == "create":
                    created[-1] = self._create(sid, path, data, False, False, undo, events)
                elif kind == CREATE_EPHEMERAL_SEQUENTIAL:
                    created[-1] = self._create(sid, path, data, True, True, undo, events)
                elif kind == "set":
                    self._set(path, data, version, undo, events)
                elif kind == "delete":
                    self._delete(path, version, undo, events)
                elif kind == "check":
                    node = self._node(path)
                    if version not in (-1, node.version):
                        raise ZkBadVersionError(f"check {path}: znode is at version {node.version}")
                else:
                    raise ValueError(f"unknown transaction op {kind!r}")
        except ZkBadVersionError as exc:
            self._roll_back(undo)
            raise MetadataVersionError(f"multi: {exc}") from exc  # as ZkClient.multi raises it
        except BaseException:
            self._roll_back(undo)
            raise
        self._fire(events)
        return created

    @staticmethod
    def _roll_back(undo: _Undo) -> None:
        for step in reversed(undo):
            step()

    # -- watches ----------------------------------------------------------------------------------

    def _fire(self, events: list[tuple[str, str]]) -> None:
        for kind, path in events:
            if kind == EventType.CHILD:
                self._deliver(self._child_watches.pop(path, {}), kind, path)
                continue
            self._deliver(self._data_watches.pop(path, {}), kind, path)
            if kind == EventType.DELETED:
                self._deliver(self._child_watches.pop(path, {}), kind, path)

    def _deliver(self, watchers: dict[Watcher, int], kind: str, path: str) -> None:
        if not watchers:
            return
        loop = asyncio.get_running_loop()
        event = MemoryWatchEvent(kind, "CONNECTED", path)
        delay = self.watch_delay(event) if self.watch_delay is not None else 0.0
        for watcher in watchers:
            if delay > 0:
                loop.call_later(delay, watcher, event)
            else:
                loop.call_soon(watcher, event)


class MemorySession(CompositeOperations):
    """One client session on a :class:`MemoryZooKeeper` (a ``MetadataStore``).

    ``disconnect()``/``reconnect()`` and ``expire()`` drive what a network partition and a
    session expiry do to a kazoo session; listeners hear the same :class:`SessionEvent` order
    as from ``ZkClient``. Operations while disconnected fail at once with ``MetadataStoreError``
    (a connection loss); those of a closed session too."""

    def __init__(self, server: MemoryZooKeeper, session_timeout_s: float) -> None:
        self._server = server
        self._timeout_s = session_timeout_s
        self._sid: int = server._open_session(self)
        self._connected = True
        self._closed = False
        self._listeners: list[SessionListener] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def server(self) -> MemoryZooKeeper:
        return self._server

    @property
    def connected(self) -> bool:
        return self._connected and not self._closed

    @property
    def session_id(self) -> int:
        return self._sid

    @property
    def session_timeout_s(self) -> float:
        return self._timeout_s

    # -- what happens to the session ------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _tell(self, event: SessionEvent) -> None:
        def dispatch() -> None:
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("session listener %r failed", listener)

        asyncio.get_running_loop().call_soon(dispatch)

    def disconnect(self) -> None:
        """Lose the connection; the server expires the session after its timeout unless
        ``reconnect()`` comes first."""
        if not self.connected:
            return
        self._connected = False
        self._tell(SessionEvent.DISCONNECTED)
        self._expiry = asyncio.get_running_loop().call_later(
            self._timeout_s, self._server.expire_session, self._sid
        )

    def reconnect(self) -> None:
        """Connect again: the same session if it is still alive, else (after ``EXPIRED``) a
        new one, as kazoo does."""
        if self._connected or self._closed:
            return
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._connected = True
        if self._server.is_live(self._sid):
            self._tell(SessionEvent.RECONNECTED)
        else:
            self._renew()

    def expire(self) -> None:
        """The server expires this session now (e.g. it missed heartbeats); a connected client
        hears ``EXPIRED`` and then ``NEW_SESSION``, a disconnected one when it reconnects."""
        if not self._closed:
            self._server.expire_session(self._sid)

    def _renew(self) -> None:
        self._tell(SessionEvent.EXPIRED)
        self._sid = self._server._open_session(self)
        self._tell(SessionEvent.NEW_SESSION)

    async def close(self) -> None:
        """Close the session: its ephemerals go at once. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._listeners.clear()
        if self._expiry is not None:
            self._expiry.cancel()
        self._server.expire_session(self._sid)
        for task in list(self._background):
            task.cancel()

    async def __aenter__(self) -> MemorySession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- operations -------------------------------------------------------------------------------

    async def _enter(self, op: str, path: str) -> int:
        """Run the hook, then check the session can talk to the server; its id."""
        if self._server.before_op is not None:
            await self._server.before_op(self._sid, op, path)
        else:
            await asyncio.sleep(0)  # an operation is never synchronous
        if self._closed:
            raise MetadataStoreError(f"{op} {path}: the session is closed")
        if not self._connected:
            raise MetadataStoreError(f"{op} {path}: connection loss")
        return self._sid

    def wrap_watcher(self, watcher: Watcher) -> Watcher:
        # Events are delivered on the event loop already; a new object per call all the same,
        # since that is what a watch is deduplicated by (in kazoo too).
        def on_loop(event: WatchEvent) -> None:
            watcher(event)

        return on_loop

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, MemoryStat]:
        sid = await self._enter("get", path)
        return self._server.get(sid, path, watch)

    async def exists(self, path: str, watch: Watcher | None = None) -> MemoryStat | None:
        sid = await self._enter("exists", path)
        return self._server.exists(sid, path, watch)

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        sid = await self._enter("get_children", path)
        return self._server.get_children(sid, path, watch)

    async def sync(self, path: str) -> None:
        await self._enter("sync", path)  # one server: every read already sees every write

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        sid = await self._enter("create", path)
        return self._server.create(sid, path, value, ephemeral, sequence, makepath)

    async def set(self, path: str, value: bytes, version: int = -1) -> MemoryStat:
        await self._enter("set", path)
        return self._server.set(path, value, version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._enter("delete", path)
        self._server.delete(path, version)

    async def multi(self, ops: list[TransactionOp]) -> list[str]:
        sid = await self._enter("multi", ops[0][1] if ops else "(empty)")
        return self._server.multi(sid, ops)

    def delete_nowait(self, path: str) -> None:
        async def delete() -> None:
            try:
                await self.delete(path)
            except MetadataStoreError as exc:
                log.debug("background delete of %s failed: %r", path, exc)

        task = asyncio.get_running_loop().create_task(delete())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _satisfies_the_protocol(session: MemorySession) -> MetadataStore:
    return session  # mypy checks here that a MemorySession is a MetadataStore
