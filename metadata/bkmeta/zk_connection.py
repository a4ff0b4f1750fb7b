"""kazoo's connection thread, made to work per batch instead of per request.

kazoo (threading handler) runs one connection thread that, per request, polls, writes one frame
and reads one wake-up byte, and per response polls and ``recv``s twice (length, then body); each
completion then goes through a queue to a second thread before :class:`bkmeta.zk.ZkClient` hands
it to the event loop. Every one of these syscalls and hand-offs releases and re-takes the GIL, and
with the event loop busy in the main thread each re-take can wait for the interpreter's switch
interval: the connection thread, not ZooKeeper, was the ceiling of metadata operations (py-spy
in ``pybk bench metadata``; figures in docs/performance.md).

Here the same protocol, the same request objects and the same session handling (kazoo's) run with:

* :class:`BatchingConnectionHandler`: every request queued is written in one ``send``; responses
  are read into a buffer with one ``recv`` per burst and all complete frames in it handled before
  the next poll, a successful ``GetData`` answer (a metadata read) straight from the buffer; a
  write tries ``send`` before polling; ``GetData`` requests queued one after another leave as
  one ``multiRead``, their watches set by a ``SetWatches`` after it (``bkmeta.zk_multi_read``);
* :class:`BatchingKazooClient`: a request wakes the connection thread with a byte only when no
  wake-up is already pending, instead of one byte (one syscall) per request; a plain create is
  not routed through kazoo's completion thread;
* :class:`InlineAsyncResult`: a callback linked with ``link_inline`` runs on the thread that sets
  the result (kazoo's connection thread), skipping the completion thread. Only callbacks that
  never block may be linked so (``ZkClient``'s, which hand the result to the event loop).

This leans on kazoo internals (``_queue``, ``_pending``, ``_read_sock``, ``_xid``,
``_read_socket``, ``_read_response``'s bookkeeping, ``_submit``'s framing), checked by
tests/unit/metadata/test_bkmeta_zk_connection.py.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import struct
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionClosedError, ConnectionDropped, SessionExpiredError
from kazoo.handlers.threading import AsyncResult
from kazoo.protocol import connection as kazoo_connection
from kazoo.protocol.connection import AUTH_XID, CLOSE_RESPONSE, ConnectionHandler
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import Auth, Create, GetData, int_struct, stat_struct
from kazoo.protocol.states import KeeperState, ZnodeStat
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from bkmeta.zk_multi_read import MAX_READS, MultiRead, MultiReadResult, Read

_RECV_BYTES = 256 * 1024
# A reply frame's length, then ZooKeeper's ReplyHeader (xid, zxid, err).
_REPLY_PREFIX = struct.Struct("!iiqi")
_WAKE_BYTES = 4096
_WANT_IO = (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE)


class InlineAsyncResult(AsyncResult):  # type: ignore[misc]
    """kazoo's threading ``AsyncResult`` plus callbacks run inline by the thread that sets it."""

    def __init__(self, handler: Any) -> None:
        super().__init__(handler)
        self._inline: list[Callable[[InlineAsyncResult], None]] = []

    def link_inline(self, callback: Callable[[InlineAsyncResult], None]) -> None:
        """Call ``callback(self)`` once set, on the setting thread (now, if already set).
        It must not block: it runs on kazoo's connection thread."""
        with self._condition:
            if not self.ready():
                self._inline.append(callback)
                return
        callback(self)

    def _do_callbacks(self) -> None:
        inline, self._inline = self._inline, []
        for callback in inline:
            callback(self)
        super()._do_callbacks()


class BatchingConnectionHandler(ConnectionHandler):  # type: ignore[misc]
    """kazoo's ``ConnectionHandler`` with batched writes and buffered reads (module docstring)."""

    _xid: int  # kazoo's: the last request id on this connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rbuf = bytearray()
        self._multi_read = True  # until a server refuses one (bkmeta.zk_multi_read)
        self.reads_coalesced = 0  # GetData requests sent inside a multiRead, for tests and tools

    def _connect(self, host: str, hostip: str, port: int) -> Any:
        self._rbuf = bytearray()  # bytes of a dropped connection mean nothing on the new one
        return super()._connect(host, hostip, port)

    # -- reading ----------------------------------------------------------------------------------

    def _read(self, length: int, timeout: float) -> bytes:
        buf = self._rbuf
        while len(buf) < length:
            buf += self._recv_some(timeout)
        data = bytes(buf[:length])
        del buf[:length]  # cheap at the front of a bytearray
        return data

    def _recv_some(self, timeout: float) -> bytes:
        chunk: bytes = self._nonblocking(lambda: self._socket.recv(_RECV_BYTES), False, timeout)
        if not chunk:
            raise ConnectionDropped("socket connection broken")
        return chunk

    def _nonblocking(self, attempt: Callable[[], Any], writing: bool, timeout: float) -> Any:
        """``attempt()`` on the non-blocking socket, polling only when it would block (kazoo
        polls before every call)."""
        sock = self._socket
        with self._socket_error_handling():
            while True:
                try:
                    return attempt()
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    ready = self.handler.select([], [sock], [], timeout)[1] if writing else (
                        self.handler.select([sock], [], [], timeout)[0]
                    )
                    if not ready:
                        what = "write" if writing else "read"
                        raise self.handler.timeout_exception(f"socket time-out during {what}") from None
                except ssl.SSLError as e:
                    if e.errno not in _WANT_IO:
                        raise

    def _frame_buffered(self) -> bool:
        buf = self._rbuf
        return len(buf) >= 4 and len(buf) >= 4 + int_struct.unpack_from(buf, 0)[0]

    def _read_socket(self, read_timeout: float) -> Any:
        """Handle the response that made the socket readable, then every complete one already
        read with it, before the connection loop polls again."""
        if not self._frame_buffered():
            self._rbuf += self._recv_some(read_timeout)
        result = None
        while True:
            if not self._data_reply():
                result = super()._read_socket(read_timeout)  # reads the rest of a partial frame
                if result == CLOSE_RESPONSE:
                    return result
            if not self._frame_buffered():
                return result

    def _data_reply(self) -> bool:
        """Handle a buffered frame here if it is the successful answer to the oldest pending
        request and that is a ``GetData`` (a metadata read): what kazoo's ``_read_socket`` and
        ``_read_response`` do for it, without their per-response copies, namedtuple header and
        logging calls. False, touching nothing, for any other frame (kazoo handles those)."""
        buf = self._rbuf
        if len(buf) < _REPLY_PREFIX.size:
            return False
        length, xid, zxid, err = _REPLY_PREFIX.unpack_from(buf, 0)
        pending = self.client._pending
        if err or xid <= 0 or len(buf) < 4 + length or not pending:
            return False
        request, async_object, expected_xid = pending[0]
        if xid != expected_xid or type(request) is not GetData:
            return False
        pending.popleft()
        client = self.client
        if zxid > 0:
            client.last_zxid = zxid
        size = int_struct.unpack_from(buf, _REPLY_PREFIX.size)[0]
        start = _REPLY_PREFIX.size + 4
        data = bytes(buf[start : start + size]) if size >= 0 else None
        stat = ZnodeStat._make(stat_struct.unpack_from(buf, start + max(size, 0)))
        del buf[: 4 + length]
        if async_object:  # as kazoo: no result, no watch registered
            async_object.set((data, stat))
            if request.watcher and not client._stopped.is_set():
                client._data_watchers[request.path].add(request.watcher)
        return True

    # -- writing ----------------------------------------------------------------------------------

    def _write(self, msg: bytes, timeout: float) -> None:
        view = memoryview(msg)
        while view:
            sent: int = self._nonblocking(functools.partial(self._socket.send, view), True, timeout)
            if not sent:
                raise ConnectionDropped("socket connection broken")
            view = view[sent:]

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        """Send every queued request in one write (kazoo sends one per poll)."""
        client = self.client
        with contextlib.suppress(OSError):
            self._read_sock.recv(_WAKE_BYTES)  # readable: returns at once, with every wake byte
        # After draining the wake bytes and before draining the queue: a request queued from now
        # on sends a new byte (see BatchingKazooClient._call).
        client._wake_pending = False
        out = bytearray()
        queue = client._queue
        try:
            while queue:
                request, async_object = queue[0]
                if request is kazoo_connection._SESSION_EXPIRED:
                    raise SessionExpiredError("Session expired: Testing")
                if request is kazoo_connection._CONNECTION_DROP:
                    raise ConnectionDropped("Connection dropped: Testing")
                if type(request) is GetData and self._multi_read and len(queue) > 1:
                    request, async_object = self._coalesce_reads(queue)
                if request.type == Auth.type:
                    xid = AUTH_XID
                else:
                    self._xid = (self._xid % 2147483647) + 1
                    xid = self._xid
                body = request.serialize()
                out += int_struct.pack(len(body) + 8)
                out += int_struct.pack(xid)
                out += int_struct.pack(request.type)
                out += body
                queue.popleft()
                client._pending.append((request, async_object, xid))
        finally:
            # What was taken off the queue is in _pending: a failed write fails it with the
            # connection (ConnectionLoss), as kazoo does.
            if out:
                self._write(bytes(out), connect_timeout)


    def _coalesce_reads(self, queue: Any) -> tuple[Any, Any]:
        """The ``GetData`` requests at the head of ``queue`` as one ``multiRead`` in their
        place (a lone one stays as it is): returns the queue's new head."""
        if type(queue[1][0]) is not GetData:
            return queue[0]  # type: ignore[no-any-return]
        reads: list[Read] = []
        while queue and len(reads) < MAX_READS and type(queue[0][0]) is GetData:
            reads.append(queue.popleft())
        self.reads_coalesced += len(reads)
        head = (MultiRead(reads), MultiReadResult(self.client, reads, self._refused_multi_read))
        queue.appendleft(head)
        return head

    def _refused_multi_read(self) -> None:
        self._multi_read = False


class BatchingKazooClient(KazooClient):  # type: ignore[misc]
    """A ``KazooClient`` on :class:`BatchingConnectionHandler` that wakes its connection thread
    once per burst of requests rather than once per request."""

    _connection: Any  # kazoo's ConnectionHandler, replaced by ours in __init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plain = self._connection
        self._connection = BatchingConnectionHandler(
            self, plain.retry_sleeper, logger=plain.logger, sasl_options=plain.sasl_options
        )
        self._wake_pending = False

    def create_async(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> Any:
        """kazoo's ``create_async`` without its completion callback for a plain create (no
        ``makepath``, no ``include_data``, no chroot): kazoo links one even then, and it runs on
        the completion thread, a hand-off per create."""
        if makepath or include_data or self.chroot or not isinstance(path, str):
            return super().create_async(path, value, acl, ephemeral, sequence, makepath, include_data)
        if value is not None and not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        if acl is None and self.default_acl:
            acl = self.default_acl
        if acl is None:
            acl = OPEN_ACL_UNSAFE
        elif isinstance(acl, ACL) or not isinstance(acl, tuple | list):
            raise TypeError("Invalid type for 'acl' (acl must be a tuple/list of ACL's)")
        flags = (1 if ephemeral else 0) | (2 if sequence else 0)
        result = self.handler.async_result()
        # A plain path (the usual one) is what kazoo's normalising would make of it.
        full_path = path if is_plain_path(path) else _prefix_root(self.chroot, path, trailing=sequence)
        request = Create(full_path, value, acl, flags)
        self._call(request, result)  # a refusal is set on ``result``
        return result

    def submit(
        self, request: Any, result: Any, schedule_wake: Callable[[Callable[[], object]], object] | None = None
    ) -> None:
        """Queue a kazoo request object as it is (no path normalising, no chroot) for the
        connection thread, which calls ``result.set`` / ``result.set_exception`` (any object with
        these two, e.g. :class:`bkmeta.zk_bridge.LoopResult`). With ``schedule_wake`` (an event
        loop's ``call_soon``) the connection thread is woken by a callback scheduled through it
        rather than now: the requests made in one pass of the loop then go out in one write,
        instead of the thread waking at the first one and contending for the GIL with the loop
        still making the others."""
        self._call(request, result, schedule_wake)

    def _call(
        self,
        request: Any,
        async_object: Any,
        schedule_wake: Callable[[Callable[[], object]], object] | None = None,
    ) -> bool | None:
        if self._state == KeeperState.AUTH_FAILED:
            async_object.set_exception(AuthFailedError())
            return False
        if self._state == KeeperState.CLOSED:
            async_object.set_exception(ConnectionClosedError("Connection has been closed"))
            return False
        if self._state == KeeperState.EXPIRED_SESSION:
            async_object.set_exception(SessionExpiredError())
            return False
        self._queue.append((request, async_object))
        # The connection thread clears the flag after taking the wake bytes and before taking the
        # queue, so a request appended while the flag is set is taken by that pass (or, with the
        # byte still to be sent by a scheduled wake, by the pass that byte starts).
        if self._wake_pending:
            return None
        self._wake_pending = True
        if schedule_wake is not None:
            schedule_wake(self._wake)
        elif not self._wake():
            async_object.set_exception(ConnectionClosedError("Connection has been closed"))
        return None

    def _wake(self) -> bool:
        """Send the wake-up byte; False if the connection is closed (its requests then fail or
        time out), and the next request tries again."""
        write_sock = self._connection._write_sock
        try:
            write_sock.send(b"\0")
        except (OSError, AttributeError):  # closed meanwhile (AttributeError: the socket is None)
            self._wake_pending = False
            return False
        return True


def is_plain_path(path: str) -> bool:
    """True if kazoo's path normalising would leave ``path`` as it is (absolute, no empty, ``.``
    or ``..`` component, no trailing slash); others take kazoo's own call, which normalises them
    or refuses them."""
    return (
        path.startswith("/") and len(path) > 1 and not path.endswith("/") and "//" not in path
        and "/." not in path
    )
