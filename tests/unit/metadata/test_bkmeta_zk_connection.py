"""The batching kazoo connection keeps kazoo's wire framing and its bookkeeping of requests.

These lean on the kazoo internals ``bkmeta.zk_connection`` uses: a kazoo upgrade that moves them
fails here rather than in production.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Create, GetData, int_struct, reply_header_struct, stat_struct
from tests.support.kazoo_wire import KazooClientParts, RecordedResult, wired_handler

from bkmeta.zk_connection import BatchingConnectionHandler, BatchingKazooClient, InlineAsyncResult
from bkmeta.zk_handler import PollingThreadingHandler


@pytest.fixture
def wired() -> Iterator[tuple[BatchingConnectionHandler, KazooClientParts, socket.socket]]:
    with wired_handler() as parts:
        yield parts


def _kazoo_frame(request: Any, xid: int) -> bytes:
    """What kazoo's own ``_submit`` writes for ``request``."""
    body = int_struct.pack(xid) + int_struct.pack(request.type) + request.serialize()
    return int_struct.pack(len(body)) + body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += sock.recv(n - len(out))
    return out


def test_every_queued_request_goes_out_framed_as_kazoo_frames_it(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket],
) -> None:
    conn, client, server = wired
    requests = [GetData("/a", None), Create("/b", b"data", [], 0), GetData("/c", None)]
    for r in requests:
        client._queue.append((r, object()))
    conn._write_sock.send(b"\0")
    conn._send_request(1.0, 1.0)
    expected = b"".join(_kazoo_frame(r, xid) for xid, r in enumerate(requests, start=1))
    assert _recv_exactly(server, len(expected)) == expected
    assert not client._queue
    assert [(r, xid) for r, _obj, xid in client._pending] == [(r, i) for i, r in enumerate(requests, 1)]
    assert client._wake_pending is False  # the next request must wake the thread again


def _reply_frames(*xids: int) -> bytes:
    out = b""
    for xid in xids:
        body = int_struct.pack(xid) + b"\0" * 8 + int_struct.pack(0)  # xid, zxid, err
        out += int_struct.pack(len(body)) + body
    return out


def _handle_with_kazoo_stub(conn: BatchingConnectionHandler, mp: pytest.MonkeyPatch) -> list[int]:
    """kazoo's per-response handling, reduced to reading the header and noting the xid in the
    list returned."""
    handled: list[int] = []

    def read_one(self: Any, read_timeout: float) -> None:
        header, _buffer, _offset = conn._read_header(read_timeout)
        handled.append(header.xid)

    mp.setattr(ConnectionHandler, "_read_socket", read_one)
    return handled


def test_responses_that_arrived_together_are_handled_in_one_pass(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, _client, server = wired
    handled = _handle_with_kazoo_stub(conn, monkeypatch)
    server.sendall(_reply_frames(1, 2, 3))
    conn._read_socket(1.0)
    assert handled == [1, 2, 3]


def test_a_partial_frame_waits_for_its_rest(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, _client, server = wired
    handled = _handle_with_kazoo_stub(conn, monkeypatch)
    frames = _reply_frames(1, 2)
    half = len(frames) - 5
    server.sendall(frames[:half])
    conn._read_socket(1.0)
    assert handled == [1]
    server.sendall(frames[half:])
    conn._read_socket(1.0)
    assert handled == [1, 2]


def test_inline_callback_runs_on_the_setting_thread_and_late_links_run_at_once() -> None:
    result = InlineAsyncResult(PollingThreadingHandler())
    seen: list[tuple[str, Any]] = []
    result.link_inline(lambda r: seen.append((threading.current_thread().name, r.value)))
    setter = threading.Thread(target=result.set, args=(42,), name="setter")
    setter.start()
    setter.join()
    assert seen == [("setter", 42)]
    result.link_inline(lambda r: seen.append(("late", r.value)))
    assert seen[-1] == ("late", 42)


@pytest.fixture
def connected_client() -> Iterator[tuple[BatchingKazooClient, socket.socket]]:
    """A client that takes requests as if connected, and the read end of its wake-up socket."""
    client = BatchingKazooClient(hosts="127.0.0.1:1", handler=PollingThreadingHandler())
    wake_read, wake_write = socket.socketpair()
    client._connection._write_sock = wake_write
    client._state = "CONNECTED"
    yield client, wake_read
    wake_read.close()
    wake_write.close()


def test_client_wakes_its_connection_once_per_burst(
    connected_client: tuple[BatchingKazooClient, socket.socket],
) -> None:
    client, wake_read = connected_client
    for path in ("/a", "/b", "/c"):
        client._call(GetData(path, None), InlineAsyncResult(client.handler))
    assert len(client._queue) == 3
    assert wake_read.recv(16) == b"\0"


@pytest.mark.parametrize(("ephemeral", "sequence"), [(False, False), (True, True)])
def test_a_plain_create_queues_the_request_kazoo_would(
    connected_client: tuple[BatchingKazooClient, socket.socket], ephemeral: bool, sequence: bool
) -> None:
    client, _ = connected_client
    ours = client.create_async("/p/ID-", b"v", ephemeral=ephemeral, sequence=sequence)
    KazooClient.create_async(client, "/p/ID-", b"v", ephemeral=ephemeral, sequence=sequence)
    (our_request, our_result), (kazoo_request, _) = client._queue
    assert our_request == kazoo_request
    assert our_result is ours  # no second result linked through the completion thread


def test_a_submitted_request_is_queued_as_it_is_with_its_result(
    connected_client: tuple[BatchingKazooClient, socket.socket],
) -> None:
    client, wake_read = connected_client
    request, result = GetData("/ledgers/00/0000/L0001", None), object()
    client.submit(request, result)
    assert list(client._queue) == [(request, result)]
    assert wake_read.recv(16) == b"\0"


def test_a_scheduled_wake_sends_one_byte_for_the_burst_when_it_runs(
    connected_client: tuple[BatchingKazooClient, socket.socket],
) -> None:
    client, wake_read = connected_client
    wake_read.setblocking(False)
    scheduled: list[Callable[[], object]] = []
    for path in ("/a", "/b", "/c"):
        client.submit(GetData(path, None), object(), scheduled.append)
    assert len(client._queue) == 3 and len(scheduled) == 1
    with pytest.raises(BlockingIOError):
        wake_read.recv(16)  # nothing sent before the scheduled wake runs
    scheduled[0]()
    assert wake_read.recv(16) == b"\0"


def _get_data_reply(xid: int, zxid: int, err: int, data: bytes | None = None, version: int = 0) -> bytes:
    body = reply_header_struct.pack(xid, zxid, err)
    if not err:
        body += int_struct.pack(-1) if data is None else int_struct.pack(len(data)) + data
        body += stat_struct.pack(11, zxid, 3, 4, version, 0, 0, 0, len(data or b""), 0, 11)
    return int_struct.pack(len(body)) + body


def _replies_handled_by(
    handler_class: type[ConnectionHandler], requests: list[Any], frames: bytes
) -> tuple[list[list[tuple[str, Any]]], int, dict[str, set[Any]]]:
    client = KazooClientParts()
    conn = handler_class(client, retry_sleeper=None)
    ours, server = socket.socketpair()
    ours.setblocking(False)
    conn._socket = ours
    outcomes = [RecordedResult() for _ in requests]
    client._pending.extend((r, o, xid) for xid, (r, o) in enumerate(zip(requests, outcomes, strict=True), 1))
    server.sendall(frames)
    while client._pending:
        conn._read_socket(1.0)
    ours.close()
    server.close()
    return [o.got for o in outcomes], client.last_zxid, dict(client._data_watchers)


def test_get_data_replies_come_out_as_kazoo_makes_them() -> None:
    """Answers to GetData take a shorter path than kazoo's; each must end as kazoo's own handler
    ends it: the value or error, the session's last zxid, and the data watches registered."""

    def watcher(_event: object) -> None: ...

    requests = [
        GetData("/ledgers/00/0000/L0001", watcher),
        GetData("/missing", watcher),  # no node: kazoo's error, and no watch registered
        GetData("/ledgers/00/0000/L0002", None),
        GetData("/empty", watcher),  # a znode without data
        Create("/c", b"", [], 0),  # another kind of request between them
        GetData("/ledgers/00/0000/L0003", watcher),
    ]
    frames = (
        _get_data_reply(1, 101, 0, b"BookieMetadataFormatVersion\t3\n...", version=2)
        + _get_data_reply(2, 0, NoNodeError.code)
        + _get_data_reply(3, 103, 0, b"x" * 300)
        + _get_data_reply(4, 104, 0, None)
        + int_struct.pack(16 + 6) + reply_header_struct.pack(5, 105, 0) + int_struct.pack(2) + b"/c"
        + _get_data_reply(6, 106, 0, b"last")
    )
    ours = _replies_handled_by(BatchingConnectionHandler, requests, frames)
    assert ours == _replies_handled_by(ConnectionHandler, requests, frames)
    results, last_zxid, watches = ours
    assert results[0] == [("value", (b"BookieMetadataFormatVersion\t3\n...", results[0][0][1][1]))]
    assert results[0][0][1][1].version == 2 and results[1] == [("error", "NoNodeError")]
    assert last_zxid == 106 and set(watches) == {"/ledgers/00/0000/L0001", "/empty", "/ledgers/00/0000/L0003"}
