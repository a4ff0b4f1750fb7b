"""Unauthenticated load cannot take a bookie down: each attack of issue 27, from a process of its own
and a source address of its own (tests/support/hostile.py), against one real bookie with small
limits; meanwhile a well-behaved client on 127.0.0.1 keeps adding. Every attack is refused or cut
off (and counted), the bookie's memory stays within its budgets, and at the end the bookie is the
same process, still serving, with every acknowledged entry readable. Ends with a bounded fuzz run of
malformed input on every listener."""

from __future__ import annotations

import random
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tests.support.bookies import BookieProcess, entry_body, is_serving
from tests.support.hostile import (
    AddPortClient,
    Attack,
    MiB,
    call_from,
    keyless_adds_message,
    limit_rejections,
    long_poll_from,
    rss_bytes,
    sources,
)

from bkproto.add_port import FRAME_HEADER, PREFACE, frame
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.handlers.add_entries import AddEntriesHandler, parse_add_entries

pytestmark = pytest.mark.integration

S = bookie_pb2
BUFFERED_BYTES = 32 * MiB
# What a bookie may hold beyond its buffered-bytes budget and its idle size: read buffers of the
# connections waiting for budget, the add path's own budgets in use, allocator slack.
MARGIN = 48 * MiB
LIMITS = {
    "maxBufferedBytes": str(BUFFERED_BYTES),
    "maxBufferedBytesPerIp": str(8 * MiB),
    "maxConnectionsPerIp": "8",
    "frameTimeoutMs": "1000",
    "writeTimeoutMs": "2000",
    "maxLongPollsPerIp": "50",
    "maxSlowRequestsPerIp": "2",
    "httpServerRequestTimeoutMs": "1000",
}
WELL_BEHAVED_LEDGER = 7
READ_LEDGER = 11  # 10 MiB of entries that a read attack asks for (and 12)


class WellBehaved:
    """The well-behaved client: adds to its own ledger over the add port, remembering every entry
    the bookie acknowledged."""

    def __init__(self, bookie: BookieProcess) -> None:
        self._bookie = bookie
        self.acknowledged: list[int] = []

    def add(self, count: int = 5) -> None:
        client = AddPortClient(self._bookie.add_port or 0)
        try:
            for _ in range(count):
                entry_id = len(self.acknowledged)
                status, _ = client.add(WELL_BEHAVED_LEDGER, entry_id)
                assert status == S.EOK
                self.acknowledged.append(entry_id)
        finally:
            client.close()


@pytest.fixture(scope="module")
def bookie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieProcess]:
    process = BookieProcess(tmp_path_factory.mktemp("hostile") / "bookie", conf=LIMITS).start()
    yield process
    process.kill9()


@pytest.fixture(scope="module")
def client(bookie: BookieProcess) -> WellBehaved:
    well_behaved = WellBehaved(bookie)
    well_behaved.add()
    return well_behaved


@pytest.fixture(scope="module")
def idle_rss(bookie: BookieProcess, client: WellBehaved) -> int:
    return rss_bytes(bookie.pid)


def rejections(bookie: BookieProcess, listener: str, limit: str) -> float:
    return limit_rejections(bookie.http_port or 0, listener, limit)


def test_unfinished_frames_hold_a_bounded_reservation_and_are_cut_off(
    bookie: BookieProcess, client: WellBehaved, idle_rss: int
) -> None:
    # 5 peers x 4 connections, each announcing a 6 MiB frame and sending 5 MiB of it, then silence
    target = f"127.0.0.1:{bookie.add_port}"
    args = (
        "--sources",
        "5",
        "--connections",
        "4",
        "--frame-bytes",
        str(6 * MiB),
        "--send-bytes",
        str(5 * MiB),
    )
    with Attack("unfinished-frames", target, *args) as attack:
        assert rss_bytes(bookie.pid) < idle_rss + BUFFERED_BYTES + MARGIN
        client.add()
        assert attack.wait_closed(20, timeout_s=60) == 20
    assert rejections(bookie, "add_port", "frame_timeout") >= 20


def test_connections_beyond_the_per_ip_limit_are_refused(bookie: BookieProcess, client: WellBehaved) -> None:
    target = f"127.0.0.1:{bookie.add_port}"
    args = ("--connections", "12", "--frame-bytes", "1000", "--send-bytes", "0")
    with Attack("unfinished-frames", target, *args, "--settle-s", "0.5") as attack:
        assert attack.closed == 4  # the 4 beyond maxConnectionsPerIp=8, closed at once
        client.add()
    assert rejections(bookie, "add_port", "connections_per_ip") >= 4


def test_unfinished_grpc_messages_are_refused_past_a_few_slow_calls_and_cut_off(
    bookie: BookieProcess, client: WellBehaved, idle_rss: int
) -> None:
    # 3 peers x 4 connections x 10 calls, each request message announcing 12 MiB and sending 8 MiB
    # of it (below gRPC, whose core grants the window the prefix announces and keeps the bytes).
    args = ("--sources", "3", "--connections", "4", "--streams", "10",
            "--frame-bytes", str(12 * MiB), "--send-bytes", str(8 * MiB), "--settle-s", "2")  # fmt: skip
    with Attack("unfinished-grpc-messages", bookie.address, *args) as attack:
        # at most maxSlowRequestsPerIp (2 here) calls per peer wait; the rest end at once
        assert rss_bytes(bookie.pid) < idle_rss + 3 * 2 * 12 * MiB + MARGIN
        client.add()
        assert attack.wait_closed(120, timeout_s=60) == 120
    # refused as one slow call too many, or cut at frameTimeoutMs (1 s here, as early as "slow")
    refused = rejections(bookie, "grpc", "slow_requests_per_ip") + rejections(bookie, "grpc", "slow_requests")
    assert refused >= 3
    assert refused + rejections(bookie, "grpc", "frame_timeout") >= 120
    assert is_serving(bookie.address)


def test_a_peer_that_never_reads_its_answers_is_bounded_then_closed(
    bookie: BookieProcess, client: WellBehaved, idle_rss: int
) -> None:
    target = f"127.0.0.1:{bookie.add_port}"
    adds = 90_000
    # What the bookie counts for one of the attack's messages (its bytes, decoded, and its answer).
    message_cost = AddEntriesHandler.message_cost(parse_add_entries(keyless_adds_message(adds, big_ids=True)))
    connections = 2
    args = ("--connections", str(connections), "--adds", str(adds), "--settle-s", "3")
    with Attack("never-read", target, *args) as attack:
        # its share of the unanswered budget (32 MiB per IP); and per connection, the message it
        # holds decoded until that budget has room, and the answer it wrote past the socket's
        # high-water mark (together under one message's cost: 12 of its 15.6 MiB, measured)
        held = 32 * MiB + connections * message_cost
        assert rss_bytes(bookie.pid) < idle_rss + held + MARGIN
        client.add()
        assert attack.wait_closed(2, timeout_s=60) == 2
    assert rejections(bookie, "add_port", "write_timeout") >= 1


def test_a_grpc_connection_without_calls_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    # gRPC gives no accept hook, so connections that carry no call escape the per-IP count; the
    # core closes them (GOAWAY) after connectionIdleTimeoutMs (2 s here). A bookie of its own:
    # this test process's gRPC channels to the shared one would be cut the same way.
    idle = BookieProcess(tmp_path / "idle", conf={"connectionIdleTimeoutMs": "2000"}).start()
    try:
        with Attack("idle-connections", idle.address, "--connections", "5") as attack:
            assert attack.wait_closed(5, timeout_s=30) == 5
    finally:
        idle.kill9()


def test_a_grpc_add_stream_that_never_reads_its_answers_is_ended(
    bookie: BookieProcess, client: WellBehaved
) -> None:
    # The bookie ends the call after writeTimeoutMs (its add budgets are released); gRPC's core
    # keeps the stuck call's buffered bytes until the connection goes: at most a message each way
    # (16 MiB each) beyond the peer's shares of the add budgets (40 MiB). Measured from just
    # before the attack: the earlier attacks' peaks stay in the allocator's free lists.
    rss_before = rss_bytes(bookie.pid)
    with Attack("never-read", bookie.address, "--grpc", "--adds", "90000", "--settle-s", "3"):
        deadline = time.monotonic() + 60
        while rejections(bookie, "grpc", "write_timeout") < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rejections(bookie, "grpc", "write_timeout") >= 1
        assert rss_bytes(bookie.pid) < rss_before + 40 * MiB + 2 * 16 * MiB + MARGIN
        client.add()
    assert is_serving(bookie.address)


@pytest.mark.parametrize("transport", ["add_port", "grpc"])
def test_a_message_of_millions_of_adds_is_refused_whole(
    bookie: BookieProcess, client: WellBehaved, transport: str
) -> None:
    before = rejections(bookie, transport, "adds_per_message")
    target = f"127.0.0.1:{bookie.add_port}" if transport == "add_port" else bookie.address
    grpc_flag = ("--grpc",) if transport == "grpc" else ()
    with Attack("big-messages", target, *grpc_flag, "--adds", "1500000", "--settle-s", "0") as attack:
        assert attack.wait_closed(1, timeout_s=60) == 1  # the add port closes; gRPC ends the call
        client.add()
    assert rejections(bookie, transport, "adds_per_message") == before + 1


def test_big_valid_messages_are_served_alongside_other_clients(
    bookie: BookieProcess, client: WellBehaved
) -> None:
    # 90,000 valid tiny adds per message: under maxAddsPerMessage, processed in slices
    target = f"127.0.0.1:{bookie.add_port}"
    with Attack(
        "big-messages", target, "--valid", "--adds", "90000", "--frames", "3", "--settle-s", "0"
    ) as heavy:
        client.add(20)
        assert heavy.wait_for("finished ", timeout_s=120) == "finished 3"
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        reply = stub.ReadEntry(S.ReadRequest(ledger_id=1_000_000, entry_id=3 * 90_000 - 1), timeout=60)
    assert reply.status == S.EOK


@pytest.mark.parametrize(
    ("method", "entry_bytes"), [("ReadEntries", 256 * 1024), ("ReadEntry", 2 * MiB)]
)
def test_read_answers_a_peer_never_takes_hold_only_its_share_of_the_answer_budget(
    tmp_path: Path, method: str, entry_bytes: int
) -> None:
    # 2 connections x 100 calls whose answers the peer never takes (raw HTTP/2, no flow-control
    # window granted): ReadEntries for 8 MiB answers (1.6 GB built and held without the budget;
    # 3.35 GB of RSS, measured), or ReadEntry of a 2 MiB entry (400 MB). The peer gets its share
    # of the read-answer budget (32 MiB) and the other calls wait with nothing built. An unsent
    # answer costs more RSS than its bytes: a batched read's about twice (65-66 MiB of growth
    # measured for the 32 MiB share), a single 2 MiB entry's about three times (93-94 MiB; it
    # was four times, 123-124 MiB, before that answer reached gRPC as wire bytes; docs/limits.md).
    # A bookie of its own: on the shared one, the growth also depended on what the earlier
    # attacks had left in its heap (in a CI run it started at 245 MB of RSS and grew by 132 MiB,
    # where other runs grew by 54-81 MiB), which is the allocator's history, not this budget.
    bookie = BookieProcess(tmp_path / "reads", conf=LIMITS).start()
    ledger = READ_LEDGER if method == "ReadEntries" else READ_LEDGER + 1
    try:
        writer = AddPortClient(bookie.add_port or 0)
        try:
            for entry_id in range(10 * MiB // entry_bytes):
                assert writer.add(ledger, entry_id, bytes(entry_bytes))[0] == S.EOK
        finally:
            writer.close()
        _attack_unread_answers(bookie, ledger, method)
    finally:
        bookie.kill9()


def _attack_unread_answers(bookie: BookieProcess, ledger: int, method: str) -> None:
    rss_before = rss_bytes(bookie.pid)
    small = S.ReadEntriesRequest(ledger_id=ledger, first_entry_id=0, max_count=3)
    args = ("--method", method, "--connections", "2", "--streams", "100", "--ledger", str(ledger),
            "--settle-s", "2")  # fmt: skip
    with Attack("unread-read-entries", bookie.address, *args):
        peak = max(rss_bytes(bookie.pid) for _ in range(20) if time.sleep(0.1) is None)
        assert peak < rss_before + 2 * 32 * MiB + MARGIN
        # another peer's reads go on meanwhile
        answer = call_from("127.0.0.1", bookie.address, "ReadEntries", small, S.ReadEntriesResponse, 30)
        assert (answer.status, len(answer.bodies)) == (S.EOK, 3)
    # The attack's calls ended with its connections, and gave their share back: a read from its
    # address is answered (it would wait for ever behind 32 MiB still held).
    answer = call_from(sources(1)[0], bookie.address, "ReadEntries", small, S.ReadEntriesResponse, 30)
    assert (answer.status, len(answer.bodies)) == (S.EOK, 3)


def test_long_polls_are_limited_per_peer_not_for_everyone(bookie: BookieProcess) -> None:
    with Attack(
        "long-polls", bookie.address, "--count", "200", "--channels", "2", "--settle-s", "5"
    ) as attack:
        assert attack.ready == {"answered": {"ETOOMANYREQUESTS": 150}, "parked": 50}
        # from another address: parked, then "nothing new yet"
        assert long_poll_from("127.0.0.3", bookie.address, timeout_ms=300) == "ENOENTRY"
    assert rejections(bookie, "grpc", "long_polls_per_ip") >= 150


def test_http_admin_refuses_beyond_its_threads_and_cuts_slow_senders(bookie: BookieProcess) -> None:
    target = f"127.0.0.1:{bookie.http_port}"
    with Attack("http-hold", target, "--connections", "10", "--settle-s", "0.5") as holders:
        assert holders.closed == 6  # one IP gets 4 of the 16 request threads; 6 get a 503 at once
        assert heartbeat(bookie) == "OK\n"  # the others are free
        assert holders.wait_closed(10, timeout_s=60) == 10  # the 4 silent ones are cut off
    with Attack(
        "http-hold", target, "--connections", "4", "--dribble-s", "0.2", "--settle-s", "0"
    ) as dribblers:
        assert dribblers.wait_closed(4, timeout_s=60) == 4
    assert rejections(bookie, "http", "connections_per_ip") >= 6
    assert rejections(bookie, "http", "request_timeout") >= 8


def test_malformed_grpc_requests_are_refused_in_one_log_line(bookie: BookieProcess) -> None:
    log_before = len(bookie.run_log_text())
    with grpc.insecure_channel(bookie.address) as channel:
        call = channel.unary_unary("/bkproto.v1.Bookie/ReadEntry")
        for _ in range(200):
            with pytest.raises(grpc.RpcError) as refused:
                call(b"\xff\xff\xff", timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(bookie.run_log_text()) - log_before < 2000  # not a traceback per request
    assert rejections(bookie, "grpc", "malformed") >= 200


def test_read_entries_at_the_largest_entry_id(bookie: BookieProcess) -> None:
    last = 2**63 - 1
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for entry_id in (last - 1, last):
            add = S.AddRequest(
                ledger_id=9, entry_id=entry_id, master_key=b"k" * 20, body=entry_body(9, entry_id)
            )
            assert stub.AddEntry(add, timeout=30).status == S.EOK
        for first, stride in ((last, 1), (last - 1, 1), (last - 1, 3)):
            request = S.ReadEntriesRequest(ledger_id=9, first_entry_id=first, max_count=5, stride=stride)
            reply = stub.ReadEntries(request, timeout=30)
            expected = [entry_body(9, e) for e in range(first, last + 1, stride)]
            assert (reply.status, list(reply.bodies)) == (S.EOK, expected)


def test_fuzzed_input_on_every_listener_leaves_the_bookie_serving(
    bookie: BookieProcess, client: WellBehaved
) -> None:
    rng = random.Random(27)
    for _ in range(100):
        fuzz_add_port(bookie.add_port or 0, rng)
    with grpc.insecure_channel(bookie.address) as channel:
        methods = [m.name for m in S.DESCRIPTOR.services_by_name["Bookie"].methods]
        for _ in range(300):
            method = rng.choice(methods)
            call = channel.unary_unary(f"/bkproto.v1.Bookie/{method}")
            try:
                call(rng.randbytes(rng.randrange(64)), timeout=2)
            except grpc.RpcError as exc:
                assert exc.code() in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.UNIMPLEMENTED,  # a unary call to a streaming method
                    grpc.StatusCode.DEADLINE_EXCEEDED,  # a parked long poll it made up
                    grpc.StatusCode.INTERNAL,
                ), (method, exc)
    for _ in range(100):
        fuzz_http(bookie.http_port or 0, rng)
    client.add()
    assert heartbeat(bookie) == "OK\n"


def test_after_every_attack_the_same_bookie_serves_every_acknowledged_entry(
    bookie: BookieProcess, client: WellBehaved
) -> None:
    assert bookie.running and is_serving(bookie.address)
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for entry_id in client.acknowledged:
            reply = stub.ReadEntry(
                S.ReadRequest(ledger_id=WELL_BEHAVED_LEDGER, entry_id=entry_id), timeout=30
            )
            assert (reply.status, reply.body) == (
                S.EOK,
                entry_body(WELL_BEHAVED_LEDGER, entry_id, entry_id - 1),
            )


# -- helpers -------------------------------------------------------------------------------------


def heartbeat(bookie: BookieProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{bookie.http_port}/heartbeat", timeout=30) as reply:
        return str(reply.read().decode())


def fuzz_add_port(port: int, rng: random.Random) -> None:
    """One connection of malformed add-port input: a mangled preface, a frame of random bytes, a
    length header beyond the limit, or a frame that stops half-way."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        kind = rng.randrange(4)
        if kind == 0:
            sock.sendall(rng.randbytes(len(PREFACE)))
        elif kind == 1:
            sock.sendall(PREFACE + frame(rng.randbytes(rng.randrange(1, 4096))))
        elif kind == 2:
            sock.sendall(PREFACE + FRAME_HEADER.pack(rng.randrange(17 * MiB, 2**32)))
        else:
            sock.sendall(PREFACE + FRAME_HEADER.pack(1000) + rng.randbytes(rng.randrange(1000)))
            return  # closed mid-frame
        sock.settimeout(30)
        while sock.recv(65536):  # answers, if the bytes happened to parse, then the bookie's close
            pass


def fuzz_http(port: int, rng: random.Random) -> None:
    """One HTTP request of random method, path, headers or body."""
    method = rng.choice([b"GET", b"PUT", b"POST", b"DELETE", rng.randbytes(5)])
    path = rng.choice(
        [b"/heartbeat", b"/api/v1/bookie/state/readonly", b"/api/v1/bookie/gc", rng.randbytes(20)]
    )
    head = method + b" " + path + b" HTTP/1.1\r\nContent-Length: " + str(rng.randrange(-5, 200)).encode()
    request = (
        head + b"\r\n" + rng.randbytes(rng.randrange(50)) + b"\r\n\r\n" + rng.randbytes(rng.randrange(200))
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # the bookie may close before reading everything: a refusal, not a failure
