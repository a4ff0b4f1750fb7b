"""`ZkClient`: kazoo (threading handler) used from asyncio without ever blocking the event loop.

Every call goes through kazoo's ``*_async`` API (or, for ``get``, kazoo's request object queued
as it is); the result is handed to an asyncio future by :class:`bkmeta.zk_bridge.LoopBridge`.
Connection loss and operation timeouts are retried a bounded number of times with exponential
backoff, then surface as :class:`MetadataStoreError` naming the path. kazoo errors never escape
this module: they are translated into ``bkproto.errors`` classes (the ledger manager narrows the
ZooKeeper-generic ones to ledger meanings such as ``NoSuchLedgerError``).

Retries of non-idempotent writes are made safe here: a create retried after a connection loss that
finds its node with our data counts as our create; a CAS retried after a loss that finds our data at
the next version counts as our write; a delete retried after a loss that finds no node is done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.serialization import CheckVersion, Create, Delete, GetData, SetData, Transaction
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from bkmeta.store import (
    CREATE_EPHEMERAL_SEQUENTIAL,
    CompositeOperations,
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
from bkmeta.zk_bridge import LoopBridge, LoopResult
from bkmeta.zk_connection import BatchingKazooClient, is_plain_path
from bkmeta.zk_handler import PollingThreadingHandler
from bkmeta.zk_security import ZkSecurity
from bkproto.errors import MetadataStoreError, MetadataVersionError

# Re-exported: callers import these from here too.
__all__ = [
    "SessionEvent",
    "SessionListener",
    "Watcher",
    "ZkBadVersionError",
    "ZkClient",
    "ZkClientConfig",
    "ZkNoNodeError",
    "ZkNodeExistsError",
    "ZkNotEmptyError",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


# kazoo errors worth another attempt: the request may not have reached the server, or the session is
# being re-established after an expiry.
_RETRIABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, asyncio.TimeoutError)


@dataclass(frozen=True)
class ZkClientConfig:
    hosts: str
    session_timeout_s: float = 10.0
    connect_timeout_s: float = 15.0
    operation_timeout_s: float = 5.0
    max_attempts: int = 4
    retry_delay_s: float = 0.1
    max_retry_delay_s: float = 2.0
    security: ZkSecurity | None = None  # the cluster's digest identity and ACLs (zkEnableSecurity)


class ZkClient(CompositeOperations):
    """An asyncio face over one kazoo session. ``await start()`` / ``await close()`` or ``async with``."""

    def __init__(self, config: ZkClientConfig) -> None:
        self.config = config
        security = config.security.kazoo_options() if config.security is not None else {}
        self._kazoo = BatchingKazooClient(
            hosts=config.hosts, timeout=config.session_timeout_s, handler=PollingThreadingHandler(),
            **security,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bridge: LoopBridge | None = None
        # Set while the session is connected (as seen from the loop). Calls wait on it rather than
        # queueing inside kazoo while disconnected, where a request given up on would still be
        # sent, late, after the reconnect.
        self._connected = asyncio.Event()
        self._listeners: list[SessionListener] = []
        self._lost = False
        self._started = False

    @classmethod
    def for_hosts(cls, hosts: str, **kwargs: Any) -> ZkClient:
        return cls(ZkClientConfig(hosts=hosts, **kwargs))

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client (tests use it to expire the session; do not block on it)."""
        return self._kazoo

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise MetadataStoreError("ZkClient not started")
        return self._loop

    @property
    def session_timeout_s(self) -> float:
        return self.config.session_timeout_s

    @property
    def connected(self) -> bool:
        return bool(self._kazoo.connected)

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until the session is connected (e.g. after ZooKeeper comes back); TimeoutError
        after ``timeout_s``."""
        await asyncio.wait_for(self._connected.wait(), timeout_s)

    @property
    def session_id(self) -> int | None:
        cid = self._kazoo.client_id
        return int(cid[0]) if cid else None

    async def start(self) -> None:
        """Connect; raises :class:`MetadataStoreError` if ZooKeeper cannot be reached in time."""
        self._loop = asyncio.get_running_loop()
        self._bridge = LoopBridge(self._loop, self.config.operation_timeout_s)
        self._kazoo.add_listener(self._on_kazoo_state)
        event = self._kazoo.start_async()
        ok = await asyncio.to_thread(event.wait, self.config.connect_timeout_s)
        if not ok or not self._kazoo.connected:
            await asyncio.to_thread(self._stop_kazoo)
            tls = self.config.security is not None and self.config.security.tls_trust is not None
            # A TLS-only port never answers a plaintext hello, which looks just like a server down.
            hint = "" if tls else (
                "; if its port takes TLS only, this client needs zkTlsTrustStore (and zkEnableSecurity "
                "with zkDigestAuthFile where the cluster's znodes have ACLs)"
            )
            raise MetadataStoreError(
                f"cannot connect to ZooKeeper at {self.config.hosts} within {self.config.connect_timeout_s} s"
                + hint
            )
        self._started = True
        self._connected.set()
        log.debug("connected to ZooKeeper %s session 0x%x", self.config.hosts, self.session_id or 0)

    async def close(self) -> None:
        """Close the session (its ephemerals go at once). Idempotent."""
        if not self._started:
            return
        self._listeners.clear()
        self._started = False
        await asyncio.to_thread(self._stop_kazoo)

    def _stop_kazoo(self) -> None:
        try:
            self._kazoo.stop()
        finally:
            self._kazoo.close()

    async def __aenter__(self) -> ZkClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- session state ----------------------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: must not block, so only hop into the loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._dispatch_state, state)
            except RuntimeError:  # the loop closed between the check and the call
                log.debug("event loop closed; dropping ZooKeeper state %s", state)

    def _dispatch_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
            self._connected.clear()
            event = SessionEvent.EXPIRED
        elif state == KazooState.SUSPENDED:
            self._connected.clear()
            event = SessionEvent.DISCONNECTED
        elif not self._kazoo.connected:
            return  # a stale CONNECTED already superseded on kazoo's thread
        else:
            self._connected.set()
            event = self._connected_event_kind()
        log.info("ZooKeeper session event: %s", event.value)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener %r failed", listener)

    def _connected_event_kind(self) -> SessionEvent:
        if self._lost:
            self._lost = False
            return SessionEvent.NEW_SESSION
        return SessionEvent.RECONNECTED

    def wrap_watcher(self, watcher: Watcher) -> Watcher:
        """A kazoo watch callback that runs ``watcher`` on the event loop instead of kazoo's thread."""
        loop = self.loop

        def on_kazoo_thread(event: WatchEvent) -> None:
            try:
                loop.call_soon_threadsafe(watcher, event)
            except RuntimeError:  # loop closed
                log.debug("event loop closed; dropping watch event %s", event)

        return on_kazoo_thread

    # -- bridging ---------------------------------------------------------------------------------

    def _start(self, start: Callable[[], Any], request: bool) -> asyncio.Future[Any]:
        """Begin one attempt; the future it returns must be released (``LoopBridge.release``).
        ``start`` makes a kazoo request object to submit (``request``), or calls a kazoo
        ``*_async`` method and returns its result."""
        bridge = self._bridge
        assert bridge is not None
        fut = bridge.future()
        try:
            if request:
                self._kazoo.submit(start(), LoopResult(bridge, fut), self.loop.call_soon)
                return fut
            result = start()
        except BaseException:
            bridge.release(fut)
            raise

        def settle(async_result: Any) -> None:  # kazoo's connection thread: must not block
            bridge.complete(fut, async_result.value, async_result.exception)

        # Inline on the connection thread, skipping kazoo's completion thread (a test may hand back
        # a plain kazoo result).
        getattr(result, "link_inline", result.rawlink)(settle)
        return fut

    def delete_nowait(self, path: str) -> None:
        """Fire-and-forget delete (id-generator nodes): failures are only logged."""

        def done(async_result: Any) -> None:
            if async_result.exception is not None:
                log.debug("background delete of %s failed: %r", path, async_result.exception)

        result = self._kazoo.delete_async(path)
        getattr(result, "link_inline", result.rawlink)(done)

    async def _call(self, what: str, path: str, start: Callable[[], Any], request: bool = False) -> Any:
        """Run one kazoo call (see :meth:`_start`) with bounded retries and translate its errors."""
        delay = self.config.retry_delay_s
        last: BaseException | None = None
        bridge = self._bridge
        assert bridge is not None
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                if not self._connected.is_set():
                    # Wait for the session (bounded like the call itself) instead of queueing in
                    # kazoo, where a request given up on would still be sent after the reconnect.
                    await asyncio.wait_for(self._connected.wait(), self.config.operation_timeout_s)
                fut = self._start(start, request)
                try:
                    return await fut
                finally:
                    bridge.release(fut)
            except _RETRIABLE as e:
                last = e
                log.debug("%s %s: %r (attempt %d)", what, path, e, attempt)
            except ConnectionClosedError as e:
                raise MetadataStoreError(f"{what} {path}: ZooKeeper client is closed") from e
            except NoNodeError as e:
                no_node = ZkNoNodeError(f"{what} {path}: no such znode")
                no_node.attempts = attempt
                raise no_node from e
            except NodeExistsError as e:
                exists = ZkNodeExistsError(f"{what} {path}: znode already exists")
                exists.attempts = attempt
                raise exists from e
            except BadVersionError as e:
                bad_version = ZkBadVersionError(f"{what} {path}: znode version changed")
                bad_version.attempts = attempt
                raise bad_version from e
            except NotEmptyError as e:
                raise ZkNotEmptyError(f"{what} {path}: znode has children") from e
            except NoAuthError as e:
                raise MetadataStoreError(
                    f"{what} {path}: refused by the znode's ACL (the cluster's ZooKeeper identity is"
                    " zkDigestAuthFile's)"
                ) from e
            except Exception as e:
                raise MetadataStoreError(f"{what} {path}: {type(e).__name__}: {e}") from e
            if attempt < self.config.max_attempts:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.max_retry_delay_s)
        reason = type(last).__name__ if last is not None else "unknown"
        raise MetadataStoreError(
            f"{what} {path}: ZooKeeper at {self.config.hosts} unavailable after "
            f"{self.config.max_attempts} attempts ({reason})"
        )

    # -- operations -------------------------------------------------------------------------------

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        if self._kazoo.chroot or not is_plain_path(path):
            data, stat = await self._call("get", path, lambda: self._kazoo.get_async(path, watch=watch))
        else:
            # kazoo's GetData sent as it is: get_async's path normalising and result object cost
            # as much as the rest of the call (a cold ledger metadata read is one of these).
            data, stat = await self._call("get", path, lambda: GetData(path, watch), request=True)
        return bytes(data or b""), stat

    async def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        stat = await self._call("exists", path, lambda: self._kazoo.exists_async(path, watch=watch))
        return stat  # type: ignore[no-any-return]

    async def sync(self, path: str) -> None:
        """Bring the server this session talks to up to date with the leader for ``path``, so
        that the reads after it see every write committed before it (ZooKeeper's ``sync``)."""
        await self._call("sync", path, lambda: self._kazoo.sync_async(path))

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        children = await self._call(
            "get_children", path, lambda: self._kazoo.get_children_async(path, watch=watch)
        )
        return list(children)

    async def set_acls(self, path: str, acls: list[Any]) -> None:
        """Replace the znode's ACL (any version: ACLs are set whole, so a retry is harmless)."""
        await self._call("set_acls", path, lambda: self._kazoo.set_acls_async(path, acls))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode and return its path (with the sequence suffix when ``sequence``)."""

        def start() -> Any:
            return self._kazoo.create_async(path, value, ephemeral=ephemeral, sequence=sequence)

        try:
            try:
                return str(await self._call("create", path, start))
            except ZkNoNodeError:
                # Parents are made here rather than by kazoo's makepath, whose completions all go
                # through kazoo's completion thread, even when the parent exists.
                if not makepath:
                    raise
                await self.ensure_path(path.rsplit("/", 1)[0])
                return str(await self._call("create", path, start))
        except ZkNodeExistsError as e:
            if e.attempts == 1 or sequence or not await self._is_own_node(path, value, ephemeral):
                raise
            # A retry after a connection loss whose first attempt did succeed: the node is ours.
            return path

    async def _is_own_node(self, path: str, value: bytes, ephemeral: bool) -> bool:
        try:
            data, stat = await self.get(path)
        except ZkNoNodeError:
            return False
        if data != value:
            return False
        return not ephemeral or stat.ephemeralOwner == self.session_id

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        """Set data if the znode is at ``version`` (-1: any); a mismatch is ``MetadataVersionError``."""
        try:
            return await self._call("set", path, lambda: self._kazoo.set_async(path, value, version))  # type: ignore[no-any-return]
        except ZkBadVersionError as e:
            if version < 0 or e.attempts == 1:
                raise
            # Our first attempt may have landed before the connection dropped: then the znode holds
            # exactly our bytes one version later. Anything else is a real conflict.
            data, stat = await self.get(path)
            if data == value and stat.version == version + 1:
                return stat
            raise

    async def delete(self, path: str, version: int = -1) -> None:
        try:
            await self._call("delete", path, lambda: self._kazoo.delete_async(path, version))
        except ZkNoNodeError as e:
            if e.attempts > 1:
                return  # an earlier try deleted it before the connection dropped
            raise

    async def multi(self, ops: list[TransactionOp]) -> list[str]:
        """Commit ``ops`` atomically. Each op is ``(kind, path, data, version)`` with kind in
        ``create`` / ``create_ephemeral_sequential`` / ``set`` / ``delete`` / ``check``; the first
        failed op is raised, translated. Returns the created path per create op, else ``""``."""

        def start() -> Any:
            txn = self._kazoo.transaction()
            for kind, path, data, version in ops:
                if kind == "create":
                    txn.create(path, data)
                elif kind == CREATE_EPHEMERAL_SEQUENTIAL:
                    txn.create(path, data, ephemeral=True, sequence=True)
                elif kind == "set":
                    txn.set_data(path, data, version)
                elif kind == "delete":
                    txn.delete(path, version)
                elif kind == "check":
                    txn.check(path, version)
                else:
                    raise ValueError(f"unknown transaction op {kind!r}")
            return txn.commit_async()

        label = ops[0][1] if ops else "(empty)"
        if self._kazoo.chroot or not all(is_plain_path(op[1]) for op in ops):
            results = await self._call("multi", label, start)
        else:
            # kazoo's Transaction sent as it is: its builder normalises every path again, which
            # cost a ledger create as much as the rest of its two multis (the id's create, delete).
            request = _transaction(ops, self._kazoo.default_acl or OPEN_ACL_UNSAFE)
            results = await self._call("multi", label, lambda: request, request=True)
        for (kind, path, _data, _version), result in zip(ops, results, strict=False):
            if isinstance(result, NodeExistsError):
                raise ZkNodeExistsError(f"multi {kind} {path}: znode already exists")
            if isinstance(result, NoNodeError):
                raise ZkNoNodeError(f"multi {kind} {path}: no such znode")
            if isinstance(result, BadVersionError):
                raise MetadataVersionError(f"multi {kind} {path}: znode version changed")
            if isinstance(result, Exception) and type(result).__name__ != "RolledBackError":
                raise MetadataStoreError(f"multi {kind} {path}: {type(result).__name__}")
        return [result if isinstance(result, str) else "" for result in results]


def _transaction(ops: list[TransactionOp], acl: Any) -> Any:
    """``ops`` as the kazoo ``Transaction`` its ``TransactionRequest`` would build, for plain
    paths without a chroot (nothing to normalise or prefix)."""
    requests: list[Any] = []
    for kind, path, data, version in ops:
        if kind == "create":
            requests.append(Create(path, data, acl, 0))
        elif kind == CREATE_EPHEMERAL_SEQUENTIAL:
            requests.append(Create(path, data, acl, 3))  # flags: ephemeral | sequence
        elif kind == "set":
            requests.append(SetData(path, data, version))
        elif kind == "delete":
            requests.append(Delete(path, version))
        elif kind == "check":
            requests.append(CheckVersion(path, version))
        else:
            raise ValueError(f"unknown transaction op {kind!r}")
    return Transaction(requests)
