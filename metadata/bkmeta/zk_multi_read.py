"""Metadata reads in bursts: the ``GetData`` requests queued together leave as one ZooKeeper
``multiRead``, and the watches they ask for are set with one ``SetWatches`` once it is answered.

A cold ledger open is one ``getData`` with a watch (the metadata cache's). ZooKeeper spends
most of its CPU per request on the request itself (its pipeline, the reply's framing), not on the
node it reads, and so does kazoo's connection thread: a burst of reads (a reader opening many
ledgers, the bench's 64 at a time) costs both sides far less as one request (figures in
docs/performance.md). ``multiRead`` (opcode 22, ZooKeeper 3.6 and later) answers each read on its
own, an error for one (no such node, no read right) failing that read only, but it sets no
watch: its reads are sent without one. The watches follow in a ``SetWatches`` (opcode 101, what a
client sends after reconnecting) for the paths read successfully, relative to the zxid of the
``multiRead``'s answer: ZooKeeper fires a watch at once for a node changed (or deleted) after
that zxid, and sets it otherwise. A change between the read and the watch is therefore never
missed; a watcher is told of it, as a watch set by the read itself would.

The watchers are registered with kazoo (``_data_watchers``) when the reads are answered, before
the ``SetWatches`` goes out, so no event can come back to find them missing. If the ``SetWatches``
fails (the connection dropped, the server refused it), those watches may not exist on the server:
their watchers are told the node changed, which for every watcher here (the metadata cache, a
ledger's watch) means read again. A server that does not know ``multiRead`` answers it with an
error: the connection then sends reads one by one again, and those of the refused request are
queued again as they were.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, TypeAlias

from kazoo.exceptions import (
    EXCEPTIONS,
    ConnectionClosedError,
    ConnectionLoss,
    SessionExpiredError,
)
from kazoo.protocol.serialization import GetData, int_struct, long_struct, stat_struct, write_string
from kazoo.protocol.states import Callback, EventType, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)

MULTI_READ = 22
SET_WATCHES = 101
# Reads per multiRead: a bound on the request and on its answer (each a ledger's metadata, a few
# hundred bytes), well inside ZooKeeper's 1 MiB packet limit.
MAX_READS = 128
_MULTI_HEADER = struct.Struct("!i?i")  # an op's type, whether it is the end marker, its error
_END = _MULTI_HEADER.pack(-1, True, -1)
_GET_DATA_HEADER = _MULTI_HEADER.pack(GetData.type, False, -1)
_EMPTY_VECTOR = int_struct.pack(0)
# A whole request refused for these reasons means the server cannot do multiRead; a connection
# failure says nothing about it.
_CONNECTION_FAILURES = (ConnectionLoss, ConnectionClosedError, SessionExpiredError)

Read = tuple[GetData, Any]  # a queued GetData and what kazoo sets with its answer
ReadOutcome: TypeAlias = tuple[bytes | None, ZnodeStat] | BaseException  # an error's exception


class MultiRead:
    """A kazoo request object (``type``, ``serialize``, ``deserialize``) of several ``GetData``,
    each sent without a watch."""

    type = MULTI_READ
    __slots__ = ("reads",)

    def __init__(self, reads: list[Read]) -> None:
        self.reads = reads

    def serialize(self) -> bytes:
        parts = []
        for request, _ in self.reads:
            parts.append(_GET_DATA_HEADER)
            parts.append(write_string(request.path))
            parts.append(b"\0")  # watch: false (multiRead would ignore it)
        parts.append(_END)
        return b"".join(parts)

    def deserialize(self, buffer: bytes, offset: int) -> list[ReadOutcome]:
        """One result per read: ``(data, stat)`` or the exception of its error."""
        results: list[ReadOutcome] = []
        while True:
            op, done, _ = _MULTI_HEADER.unpack_from(buffer, offset)
            offset += _MULTI_HEADER.size
            if done:
                break
            if op == GetData.type:
                (size,) = int_struct.unpack_from(buffer, offset)
                offset += 4
                data = bytes(buffer[offset : offset + size]) if size >= 0 else None
                offset += max(size, 0)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            elif op == -1:
                (code,) = int_struct.unpack_from(buffer, offset)
                offset += 4
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead answer with an op of type {op}")
        if len(results) != len(self.reads):
            raise ValueError(f"multiRead of {len(self.reads)} reads answered with {len(results)} results")
        return results


class SetWatches:
    """A kazoo request object: set data watches on ``paths``, each firing at once if its node
    changed after ``relative_zxid``."""

    type = SET_WATCHES
    __slots__ = ("paths", "relative_zxid")

    def __init__(self, relative_zxid: int, paths: list[str]) -> None:
        self.relative_zxid = relative_zxid
        self.paths = paths

    def serialize(self) -> bytes:
        data = [int_struct.pack(len(self.paths)), *map(write_string, self.paths)]
        return b"".join((long_struct.pack(self.relative_zxid), *data, _EMPTY_VECTOR, _EMPTY_VECTOR))

    def deserialize(self, buffer: bytes, offset: int) -> None:
        return None


class MultiReadResult:
    """What kazoo sets with a :class:`MultiRead`'s answer (on its connection thread): each read's
    own result, its watcher registered, then the :class:`SetWatches` queued."""

    __slots__ = ("_client", "_on_unsupported", "_reads")

    def __init__(self, client: Any, reads: list[Read], on_unsupported: Callable[[], None]) -> None:
        self._client = client
        self._reads = reads
        self._on_unsupported = on_unsupported

    def __bool__(self) -> bool:  # kazoo tests its async object for truth
        return True

    def set(self, results: list[ReadOutcome]) -> None:
        client = self._client
        watched: list[str] = []
        stopped = client._stopped.is_set()
        for (request, result), outcome in zip(self._reads, results, strict=True):
            if isinstance(outcome, BaseException):
                result.set_exception(outcome)
                continue
            result.set(outcome)
            if request.watcher is not None and not stopped:
                client._data_watchers[request.path].add(request.watcher)
                watched.append(request.path)
        if watched:
            # last_zxid is this answer's: kazoo takes it from the reply header before the body.
            watches = SetWatches(client.last_zxid, watched)
            client._call(watches, WatchesResult(client, watched))

    def set_exception(self, exception: BaseException) -> None:
        if isinstance(exception, _CONNECTION_FAILURES):
            for _, result in self._reads:
                result.set_exception(exception)
            return
        log.warning(
            "ZooKeeper refused a multiRead (%r); sending metadata reads one by one (ZooKeeper 3.6 "
            "or later answers them in bursts)", exception,
        )
        self._on_unsupported()
        for request, result in self._reads:
            self._client._call(request, result)


class WatchesResult:
    """What kazoo sets with a :class:`SetWatches`' answer: nothing to do when it is set; when it
    fails, the watchers of its paths are told their nodes changed (their watches may not exist)."""

    __slots__ = ("_client", "_paths")

    def __init__(self, client: Any, paths: list[str]) -> None:
        self._client = client
        self._paths = paths

    def __bool__(self) -> bool:
        return True

    def set(self, value: object = None) -> None:
        return None

    def set_exception(self, exception: BaseException) -> None:
        client = self._client
        log.debug("SetWatches for %d paths failed (%r): telling their watchers", len(self._paths), exception)
        if client._stopped.is_set():
            return
        for path in self._paths:
            event = WatchedEvent(EventType.CHANGED, client._state, client.unchroot(path))
            for watcher in client._data_watchers.pop(path, ()):
                client.handler.dispatch_callback(Callback("watch", watcher, (event,)))
