"""Bookie registration (bookie side) and the live bookie set (client side).

A bookie announces itself with an EPHEMERAL ``/ledgers/available/<bookieId>`` znode holding a
serialized ``BookieServiceInfoFormat`` (its gRPC, add-port and HTTP endpoints, its rack); a
read-only bookie lives under ``available/readonly/`` instead. Ephemerals die with the session, so
registration is re-created whenever the ZooKeeper session is replaced after an expiry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from bkmeta.clock import Clock, LoopClock
from bkmeta.layout import READONLY_ZNODE, ZkLayout
from bkmeta.store import EventType, MetadataStore, SessionEvent, WatchEvent, ZkNodeExistsError, ZkNoNodeError
from bkproto.add_port import ENDPOINT_ID as ADD_ENDPOINT_ID
from bkproto.add_port import ENDPOINT_PROTOCOL as ADD_PROTOCOL
from bkproto.add_port import READ_ENDPOINT_ID, READ_ENDPOINT_PROTOCOL
from bkproto.errors import MetadataStoreError
from bkproto.v1 import metadata_pb2

log = logging.getLogger(__name__)

GRPC_ENDPOINT_ID = "bookie"
HTTP_ENDPOINT_ID = "http"
DEFAULT_RACK = "/default-rack"
_REREGISTER_RETRY_S = 1.0  # between attempts to re-register after a session expiry


@dataclass(frozen=True)
class BookieServiceInfo:
    bookie_id: str
    grpc_host: str
    grpc_port: int
    http_host: str | None = None
    http_port: int | None = None
    rack: str = DEFAULT_RACK
    properties: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    add_port: int | None = None  # the add port (``bkproto.add_port``), on the gRPC host
    add_port_reads: bool = False  # the add port serves the ReadStream too
    # Its listeners speak only TLS: written as BookKeeper does, ``auth: "tls"`` on the endpoints,
    # so that a client without TLS can say so instead of failing to connect.
    tls: bool = False

    @property
    def add_target(self) -> str | None:
        """``host:port`` of the add port, if the bookie has one."""
        return f"{self.grpc_host}:{self.add_port}" if self.add_port is not None else None

    @classmethod
    def for_address(cls, host: str, port: int, **kwargs: object) -> BookieServiceInfo:
        return cls(f"{host}:{port}", host, port, **kwargs)  # type: ignore[arg-type]

    @property
    def grpc_target(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"

    def to_bytes(self) -> bytes:
        msg = metadata_pb2.BookieServiceInfoFormat()
        auth = ["tls"] if self.tls else []
        msg.endpoints.add(
            id=GRPC_ENDPOINT_ID, port=self.grpc_port, host=self.grpc_host, protocol="grpc", auth=auth
        )
        if self.add_port is not None:
            msg.endpoints.add(
                id=ADD_ENDPOINT_ID, port=self.add_port, host=self.grpc_host, protocol=ADD_PROTOCOL, auth=auth
            )
            if self.add_port_reads:  # a second endpoint: clients that predate it look for the first
                msg.endpoints.add(
                    id=READ_ENDPOINT_ID, port=self.add_port, host=self.grpc_host,
                    protocol=READ_ENDPOINT_PROTOCOL, auth=auth,
                )  # fmt: skip
        if self.http_host is not None and self.http_port is not None:
            msg.endpoints.add(
                id=HTTP_ENDPOINT_ID, port=self.http_port, host=self.http_host, protocol="http", auth=auth
            )
        msg.properties.update(self.properties)
        msg.properties["rack"] = self.rack
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, bookie_id: str, data: bytes) -> BookieServiceInfo:
        """Decode a registration; empty data (older BookKeeper) falls back to the id's host:port."""
        host, _, port = bookie_id.rpartition(":")
        fallback = cls(bookie_id, host or bookie_id, int(port) if port.isdigit() else 3181)
        if not data:
            return fallback
        msg = metadata_pb2.BookieServiceInfoFormat()
        try:
            msg.ParseFromString(data)
        except DecodeError:
            log.warning("bookie %s has an unreadable registration; using its id as address", bookie_id)
            return fallback
        grpc_ep = next((e for e in msg.endpoints if e.id == GRPC_ENDPOINT_ID), None)
        http_ep = next((e for e in msg.endpoints if e.id == HTTP_ENDPOINT_ID), None)
        add_ep = next(
            (e for e in msg.endpoints if e.id == ADD_ENDPOINT_ID and e.protocol == ADD_PROTOCOL), None
        )
        read_ep = next(
            (e for e in msg.endpoints if e.id == READ_ENDPOINT_ID and e.protocol == READ_ENDPOINT_PROTOCOL),
            None,
        )
        props = dict(msg.properties)
        return cls(
            bookie_id,
            grpc_ep.host if grpc_ep else fallback.grpc_host,
            grpc_ep.port if grpc_ep else fallback.grpc_port,
            http_ep.host if http_ep else None,
            http_ep.port if http_ep else None,
            props.get("rack", DEFAULT_RACK),
            props,
            add_ep.port if add_ep else None,
            add_port_reads=add_ep is not None and read_ep is not None and read_ep.port == add_ep.port,
            tls=grpc_ep is not None and "tls" in grpc_ep.auth,
        )


class BookieIdInUseError(MetadataStoreError):
    """Another live session holds this bookie's registration."""

    retriable = False


class BookieRegistration:
    """The bookie's own ephemeral registration, kept alive across session expiries."""

    def __init__(
        self,
        zk: MetadataStore,
        info: BookieServiceInfo,
        layout: ZkLayout | None = None,
        stale_wait_s: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self._zk = zk
        self._clock = clock or LoopClock()
        self._info = info
        self._layout = layout or ZkLayout()
        # How long to wait for a stale registration of a previous incarnation to expire; 0 means
        # the session timeout (plus a margin).
        self._stale_wait_s = stale_wait_s or zk.session_timeout_s * 1.5 + 1.0
        self._read_only = False
        self._registered = False
        self._reregister_pending = False  # a re-registration failed while disconnected
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def path(self) -> str:
        return self._path_for(self._read_only)

    def _path_for(self, read_only: bool) -> str:
        if read_only:
            return self._layout.readonly_bookie(self._info.bookie_id)
        return self._layout.writable_bookie(self._info.bookie_id)

    async def register(self, read_only: bool | None = None) -> None:
        """Create the bookie's znode, under ``available/readonly/`` if ``read_only`` (``None``:
        where it is now, read under the lock so a move in flight is not undone)."""
        async with self._lock:
            if read_only is not None:
                self._read_only = read_only
            await self._create_own_node(self.path)
            if not self._registered:
                self._zk.add_session_listener(self._on_session_event)
                self._registered = True
            log.info("bookie %s registered at %s", self._info.bookie_id, self.path)

    async def _create_own_node(self, path: str) -> None:
        """Create ``path`` as our ephemeral, waiting up to the stale wait for another session's
        node (probably our previous incarnation's, after a kill -9) to expire.

        The wait counts from the moment the other owner is seen, and starts over whenever our
        connection came back: ZooKeeper expires nothing while it is down or out of reach, and a
        restarted ZooKeeper gives every restored session a fresh timeout."""
        data = self._info.to_bytes()
        deadline: float | None = None
        owner: int | None = None
        reconnected = False

        def on_session_event(event: SessionEvent) -> None:
            nonlocal reconnected
            if event in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION):
                reconnected = True

        self._zk.add_session_listener(on_session_event)
        try:
            while True:
                try:
                    await self._zk.create(path, data, ephemeral=True, makepath=True)
                    return
                except ZkNodeExistsError:
                    pass
                try:
                    _, stat = await self._zk.get(path)
                except ZkNoNodeError:
                    continue
                if stat.ephemeralOwner == self._zk.session_id:
                    return  # already ours (e.g. re-register raced with a reconnect)
                now = self._clock.monotonic()
                if deadline is None or reconnected or stat.ephemeralOwner != owner:
                    deadline, owner, reconnected = now + self._stale_wait_s, stat.ephemeralOwner, False
                if now > deadline:
                    raise BookieIdInUseError(
                        f"{path} is held by another ZooKeeper session (0x{stat.ephemeralOwner:x}): is "
                        f"another bookie running as {self._info.bookie_id}?"
                    )
                # Probably our previous incarnation (kill -9, quick restart): wait for its session to
                # expire.
                await asyncio.sleep(0.25)
        finally:
            self._zk.remove_session_listener(on_session_event)

    async def set_read_only(self, read_only: bool) -> None:
        """Move the registration between ``available/`` and ``available/readonly/``.

        Idempotent, so a caller retries a move that failed half-way: the state changes only
        once both steps worked, and each step is a no-op when already done."""
        async with self._lock:
            if not self._registered:
                self._read_only = read_only  # register() will use it
                return
            # New node first, then the old one: clients never see the bookie vanish entirely.
            await self._create_own_node(self._path_for(read_only))
            await self._zk.delete_own_ephemeral(self._path_for(not read_only))
            changed = read_only != self._read_only
            self._read_only = read_only
            if changed:
                now = "read-only" if read_only else "writable"
                log.info("bookie %s is now %s", self._info.bookie_id, now)

    def _on_session_event(self, event: SessionEvent) -> None:
        retry = event == SessionEvent.RECONNECTED and self._reregister_pending
        if event != SessionEvent.NEW_SESSION and not retry:
            return
        self._reregister_pending = False
        task = asyncio.ensure_future(self._reregister())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reregister(self) -> None:
        """Register on the new session, and again after a retriable failure (a connection loss
        with the create in flight): once reconnected if the connection is down, after a pause
        if not. Nothing else would put the ephemeral back: a session that survives a
        connection loss brings no NEW_SESSION."""
        while True:
            try:
                await self.register()
                return
            except MetadataStoreError as exc:
                if not exc.retriable:
                    log.exception("bookie %s could not re-register after session expiry",
                                  self._info.bookie_id)
                    return
                if not self._zk.connected:
                    log.warning("bookie %s could not re-register after session expiry: %s; retrying "
                                "once reconnected", self._info.bookie_id, exc)
                    self._reregister_pending = True
                    return
                log.warning("bookie %s could not re-register after session expiry: %s; retrying",
                            self._info.bookie_id, exc)
            await asyncio.sleep(_REREGISTER_RETRY_S)

    async def close(self) -> None:
        """Unregister (delete the ephemeral now rather than at session end)."""
        self._zk.remove_session_listener(self._on_session_event)
        for task in list(self._tasks):
            task.cancel()
        if self._registered:
            self._registered = False
            if not self._zk.connected:
                # Retrying the delete against a ZooKeeper that is gone only delays the stop (by
                # ~16 s of retries); the ephemeral node goes away with the session anyway.
                log.warning("ZooKeeper unreachable; %s expires with the session", self.path)
                return
            try:
                await self._zk.delete_own_ephemeral(self.path)
            except MetadataStoreError:
                log.warning("could not delete %s on close; it expires with the session", self.path)


BookieSetListener = Callable[[dict[str, BookieServiceInfo], dict[str, BookieServiceInfo]], None]


class BookieWatcher:
    """Client-side live view of writable and read-only bookies, kept current by child watches."""

    def __init__(self, zk: MetadataStore, layout: ZkLayout | None = None) -> None:
        self._zk = zk
        self._layout = layout or ZkLayout()
        self._writable: dict[str, BookieServiceInfo] = {}
        self._readonly: dict[str, BookieServiceInfo] = {}
        self._listeners: list[BookieSetListener] = []
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def start(self) -> None:
        self._zk.add_session_listener(self._on_session_event)
        await asyncio.gather(self._refresh(readonly=False), self._refresh(readonly=True))

    def writable_bookies(self) -> dict[str, BookieServiceInfo]:
        return dict(self._writable)

    def readonly_bookies(self) -> dict[str, BookieServiceInfo]:
        return dict(self._readonly)

    def all_bookies(self) -> dict[str, BookieServiceInfo]:
        return {**self._readonly, **self._writable}

    async def is_registered(self, bookie_id: str) -> bool:
        """Whether ``bookie_id`` is registered now, writable or read-only, asked of ZooKeeper
        itself (after a sync), not of this cached view: the view may lag a new registration,
        and it refreshes ``available/`` and ``readonly/`` one at a time, so a bookie moving
        between them can be missing from both for a moment. A bookie creates its new znode
        before it deletes the old one, so one of the two always exists."""
        await self._zk.sync(self._layout.available)
        for path in (self._layout.writable_bookie(bookie_id), self._layout.readonly_bookie(bookie_id)):
            if await self._zk.exists(path) is not None:
                return True
        return False

    def add_listener(self, listener: BookieSetListener) -> None:
        """``listener(writable, readonly)`` runs on the event loop after every change."""
        self._listeners.append(listener)

    def remove_listener(self, listener: BookieSetListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def wait_for(
        self, predicate: Callable[[BookieWatcher], bool], timeout_s: float = 30.0
    ) -> None:
        """Wait until ``predicate(self)`` holds (e.g. "3 writable bookies"); ``TimeoutError`` if not."""
        async with asyncio.timeout(timeout_s):
            while not predicate(self):
                self._changed.clear()
                await self._changed.wait()

    def _spawn_refresh(self, readonly: bool) -> None:
        if self._closed:
            return
        task = asyncio.ensure_future(self._refresh(readonly))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self, readonly: bool) -> None:
        path = self._layout.readonly if readonly else self._layout.available

        def on_event(event: WatchEvent) -> None:
            if event.type != EventType.NONE:
                self._spawn_refresh(readonly)

        try:
            children = await self._zk.get_children(path, watch=self._zk.wrap_watcher(on_event))
        except ZkNoNodeError:
            # No cluster yet: watch for the node to appear.
            await self._zk.exists(path, watch=self._zk.wrap_watcher(on_event))
            children = []
        except MetadataStoreError:
            log.exception("cannot list bookies under %s; will retry on reconnect", path)
            return
        current = self._readonly if readonly else self._writable
        # sorted, not a set: a set's order changes with the process's hash seed, and the order
        # of the fetches below must not (the deterministic simulation replays runs exactly)
        names = sorted(c for c in children if c != READONLY_ZNODE)
        fresh: dict[str, BookieServiceInfo] = {n: current[n] for n in names if n in current}
        missing = [n for n in names if n not in current]

        async def fetch(name: str) -> None:
            try:
                data, _ = await self._zk.get(f"{path}/{name}")
            except ZkNoNodeError:
                return
            fresh[name] = BookieServiceInfo.from_bytes(name, data)

        await asyncio.gather(*(fetch(n) for n in missing))
        if readonly:
            self._readonly = fresh
        else:
            self._writable = fresh
        self._changed.set()
        for listener in list(self._listeners):
            try:
                listener(self.writable_bookies(), self.readonly_bookies())
            except Exception:
                log.exception("bookie set listener %r failed", listener)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED):
            self._spawn_refresh(False)
            self._spawn_refresh(True)

    async def close(self) -> None:
        self._closed = True
        self._zk.remove_session_listener(self._on_session_event)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
