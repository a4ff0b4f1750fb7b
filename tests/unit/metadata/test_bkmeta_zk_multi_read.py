"""Reads queued together leave as one ZooKeeper multiRead, and their watches as one SetWatches.

The wire bytes are spelled out here from ZooKeeper's jute records (MultiHeader, GetDataRequest,
SetWatches), not built with the code under test.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import Create, GetData, int_struct, reply_header_struct, stat_struct
from tests.support.kazoo_wire import KazooClientParts, RecordedResult, wired_handler

from bkmeta.zk_connection import BatchingConnectionHandler
from bkmeta.zk_multi_read import MultiRead, MultiReadResult, SetWatches, WatchesResult


@pytest.fixture
def wired() -> Iterator[tuple[BatchingConnectionHandler, KazooClientParts, socket.socket]]:
    with wired_handler() as parts:
        yield parts


def _jute_string(text: str) -> bytes:
    return struct.pack("!i", len(text)) + text.encode()


def _frame(xid: int, op: int, body: bytes) -> bytes:
    return struct.pack("!iii", len(body) + 8, xid, op) + body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += sock.recv(n - len(out))
    return out


def _watcher(_event: object) -> None: ...


def test_consecutive_reads_leave_as_one_multi_read_and_other_requests_keep_their_place(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket],
) -> None:
    conn, client, server = wired
    queued = [GetData("/a", None), GetData("/b", _watcher), Create("/c", b"", [], 0), GetData("/d", None)]
    for request in queued:
        client._queue.append((request, RecordedResult()))
    conn._send_request(1.0, 1.0)
    multi_read = b"".join(
        struct.pack("!i?i", 4, False, -1) + _jute_string(path) + b"\0" for path in ("/a", "/b")
    ) + struct.pack("!i?i", -1, True, -1)
    create = queued[2].serialize()
    lone = queued[3].serialize()  # a lone read stays a GetData
    expected = _frame(1, 22, multi_read) + _frame(2, 1, bytes(create)) + _frame(3, 4, bytes(lone))
    assert _recv_exactly(server, len(expected)) == expected
    pending = list(client._pending)
    assert [type(r) for r, _, _ in pending] == [MultiRead, Create, GetData]
    assert [xid for _, _, xid in pending] == [1, 2, 3]
    assert conn.reads_coalesced == 2


def _multi_read_answer(xid: int, zxid: int, results: list[bytes | int | None]) -> bytes:
    """A multiRead's reply frame: per read its data (None: a znode without data) or an error code."""
    body = reply_header_struct.pack(xid, zxid, 0)
    for version, result in enumerate(results):
        if isinstance(result, int):
            body += struct.pack("!i?i", -1, False, result) + int_struct.pack(result)
        else:
            data = int_struct.pack(-1) if result is None else int_struct.pack(len(result)) + result
            stat = stat_struct.pack(11, zxid, 3, 4, version, 0, 0, 0, len(result or b""), 0, 11)
            body += struct.pack("!i?i", 4, False, -1) + data + stat
    body += struct.pack("!i?i", -1, True, -1)
    return int_struct.pack(len(body)) + body


def test_an_answer_settles_each_read_registers_its_watch_then_queues_set_watches(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket],
) -> None:
    conn, client, server = wired
    reads = [
        (GetData("/l/1", _watcher), RecordedResult()),
        (GetData("/missing", _watcher), RecordedResult()),  # fails alone; no watch for it
        (GetData("/l/2", None), RecordedResult()),  # read without a watch
        (GetData("/empty", _watcher), RecordedResult()),
    ]
    client._pending.append((MultiRead(reads), MultiReadResult(client, reads, lambda: None), 1))
    server.sendall(_multi_read_answer(1, 500, [b"one", NoNodeError.code, b"two", None]))
    conn._read_socket(1.0)
    got = [outcome.got for _, outcome in reads]
    assert got[0][0][0] == "value" and got[0][0][1][0] == b"one" and got[0][0][1][1].version == 0
    assert got[1] == [("error", "NoNodeError")]
    assert got[2][0][1][0] == b"two" and got[3][0][1][0] is None and got[3][0][1][1].version == 3
    assert set(client._data_watchers) == {"/l/1", "/empty"}
    assert client.last_zxid == 500
    [(watches, _result)] = client._queue
    assert isinstance(watches, SetWatches)
    assert watches.serialize() == (
        struct.pack("!qi", 500, 2) + _jute_string("/l/1") + _jute_string("/empty") + struct.pack("!ii", 0, 0)
    )


def test_a_server_without_multi_read_gets_the_reads_again_one_by_one(
    wired: tuple[BatchingConnectionHandler, KazooClientParts, socket.socket],
) -> None:
    conn, client, server = wired
    reads = [(GetData("/a", None), RecordedResult()), (GetData("/b", None), RecordedResult())]
    client._pending.append((MultiRead(reads), MultiReadResult(client, reads, conn._refused_multi_read), 1))
    body = reply_header_struct.pack(1, 7, UnimplementedError.code)
    server.sendall(int_struct.pack(len(body)) + body)
    conn._read_socket(1.0)
    assert list(client._queue) == reads and all(not outcome.got for _, outcome in reads)
    conn._send_request(1.0, 1.0)
    assert [type(r) for r, _, _ in client._pending] == [GetData, GetData]


def test_a_lost_connection_fails_every_read_of_the_multi_read() -> None:
    client = KazooClientParts()
    reads = [(GetData("/a", _watcher), RecordedResult()), (GetData("/b", None), RecordedResult())]
    MultiReadResult(client, reads, lambda: pytest.fail("not a refusal")).set_exception(ConnectionLoss())
    assert [outcome.got for _, outcome in reads] == [[("error", "ConnectionLoss")]] * 2
    assert not client._queue and not client._data_watchers


def test_failed_set_watches_tells_their_watchers_the_node_changed() -> None:
    client = KazooClientParts()
    client._data_watchers["/l/1"].add(_watcher)
    client._data_watchers["/l/9"].add(_watcher)  # not in this SetWatches: left alone
    WatchesResult(client, ["/l/1"]).set_exception(ConnectionLoss())
    [callback] = client.handler.dispatched
    assert callback.func is _watcher and callback.args[0].path == "/l/1"
    assert callback.args[0].type == "CHANGED"
    assert set(client._data_watchers) == {"/l/9"}
