"""Test doubles for the kazoo internals ``bkmeta.zk_connection`` and ``bkmeta.zk_multi_read``
touch: the parts of a ``KazooClient`` its connection handler uses, a result that records what
kazoo sets on it, and a handler wired to one end of a socket pair standing for ZooKeeper."""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from bkmeta.zk_connection import BatchingConnectionHandler
from bkmeta.zk_handler import PollingThreadingHandler


class RecordingHandler(PollingThreadingHandler):  # type: ignore[misc]
    """kazoo's handler, with the watch callbacks it is given to dispatch kept in a list."""

    def __init__(self) -> None:
        super().__init__()
        self.dispatched: list[Any] = []

    def dispatch_callback(self, callback: Any) -> None:
        self.dispatched.append(callback)


class KazooClientParts:
    """The parts of a KazooClient the connection handler touches when sending and reading."""

    def __init__(self) -> None:
        self.handler = RecordingHandler()
        self._queue: collections.deque[tuple[Any, Any]] = collections.deque()
        self._pending: collections.deque[tuple[Any, Any, int]] = collections.deque()
        self._wake_pending = True
        self._stopped = threading.Event()
        self._data_watchers: collections.defaultdict[str, set[Any]] = collections.defaultdict(set)
        self._child_watchers: collections.defaultdict[str, set[Any]] = collections.defaultdict(set)
        self._state = "CONNECTED"
        self.last_zxid = 0

    def _call(self, request: Any, async_object: Any) -> None:
        self._queue.append((request, async_object))

    def unchroot(self, path: str) -> str:
        return path


class RecordedResult:
    """A request's result as kazoo sets it (kazoo calls only these two)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []

    def set(self, value: Any = None) -> None:
        self.got.append(("value", value))

    def set_exception(self, exception: BaseException) -> None:
        self.got.append(("error", type(exception).__name__))


@contextlib.contextmanager
def wired_handler() -> Iterator[tuple[BatchingConnectionHandler, KazooClientParts, socket.socket]]:
    """A handler whose ZooKeeper socket is one end of a socket pair (the other end given back)."""
    client = KazooClientParts()
    conn = BatchingConnectionHandler(client, retry_sleeper=None)
    ours, server = socket.socketpair()
    ours.setblocking(False)
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)  # the connection thread drains its wake-up bytes without waiting
    conn._socket, conn._read_sock, conn._write_sock, conn._xid = ours, wake_read, wake_write, 0
    try:
        yield conn, client, server
    finally:
        for s in (ours, server, wake_read, wake_write):
            s.close()
