"""A real bookie process: serve adds and reads, HTTP admin, clean SIGTERM, state across restarts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from tests.support.admin_http import get_ok_text
from tests.support.bookies import BookieFactory, BookieProcess, entry_body, is_serving

from bkproto.entry_format import LAC_HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"m" * 20


def stub_for(process: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    with grpc.insecure_channel(process.address) as channel:
        yield bookie_pb2_grpc.BookieStub(channel)


@pytest.fixture
def stub(bookie: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    yield from stub_for(bookie)


def add_all(stub: bookie_pb2_grpc.BookieStub, ledger_id: int, entries: range, key: bytes = KEY) -> None:
    adds = [
        S.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=key, body=entry_body(ledger_id, e, e - 1))
        for e in entries
    ]
    (response,) = list(stub.AddEntries(iter([S.AddEntriesRequest(adds=adds)]), timeout=30))
    assert [r.status for r in response.results] == [S.EOK] * len(adds), response


def test_adds_then_reads_come_back_byte_identical(stub: bookie_pb2_grpc.BookieStub) -> None:
    add_all(stub, 1, range(50))
    for e in (0, 17, 49):
        r = stub.ReadEntry(S.ReadRequest(ledger_id=1, entry_id=e), timeout=10)
        assert (r.status, r.body) == (S.EOK, entry_body(1, e, e - 1))
    batch = stub.ReadEntries(S.ReadEntriesRequest(ledger_id=1, first_entry_id=10, max_count=5), timeout=10)
    assert list(batch.bodies) == [entry_body(1, e, e - 1) for e in range(10, 15)]
    last = stub.ReadEntry(S.ReadRequest(ledger_id=1, entry_id=-1), timeout=10)
    assert (last.entry_id, last.max_lac) == (49, 48)
    runs = stub.GetListOfEntriesOfLedger(S.GetListOfEntriesOfLedgerRequest(ledger_id=1), timeout=10)
    assert [(r.first, r.last) for r in runs.ranges] == [(0, 49)]
    info = stub.GetBookieInfo(S.GetBookieInfoRequest(requested=S.TOTAL_DISK_CAPACITY | S.FREE_DISK_SPACE))
    assert info.total_disk_capacity >= info.free_disk_space > 0


def test_http_heartbeat_and_metrics(bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub) -> None:
    add_all(stub, 2, range(3))
    assert get_ok_text(bookie.http_port, "/heartbeat") == "OK\n"
    metrics = get_ok_text(bookie.http_port, "/metrics")
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 3.0' in metrics
    assert 'bookkeeper_server_READ_ENTRY_REQUEST{quantile="0.999",success="true"}' in metrics
    assert 'bookie_journal_JOURNAL_SYNC_count{success="true"}' in metrics
    # served by a bookie process too (their values: tests/unit/server/test_storage_read_metrics.py)
    assert 'bookie_journal_JOURNAL_CREATION_LATENCY_count{success="true"} 1.0' in metrics
    assert 'bookie_read_entry_count{success="true"}' in metrics
    assert "bookkeeper_server_BookieReadThreadPool_queue_0 0.0" in metrics
    assert 'bookkeeper_server_BookieReadThreadPool_task_queued_count{success="true"}' in metrics
    assert 'bookkeeper_server_BookieReadThreadPool_task_execution_count{success="true"}' in metrics
    assert get_ok_text(bookie.http_port, "/api/v1/bookie/is_ready") == ""  # 200: serving and registered
    info = json.loads(get_ok_text(bookie.http_port, "/api/v1/bookie/info"))
    grpc_info = stub.GetBookieInfo(S.GetBookieInfoRequest(requested=S.TOTAL_DISK_CAPACITY))
    assert info["totalSpace"] == grpc_info.total_disk_capacity >= info["freeSpace"] > 0


def test_sigterm_exits_zero_and_data_survives_a_clean_restart(
    bookie: BookieProcess, stub: bookie_pb2_grpc.BookieStub
) -> None:
    add_all(stub, 3, range(20))
    assert bookie.stop() == 0
    assert "stopped" in bookie.log_text()
    bookie.start()
    for reopened in stub_for(bookie):
        r = reopened.ReadEntries(
            S.ReadEntriesRequest(ledger_id=3, first_entry_id=0, max_count=100), timeout=10
        )
        assert list(r.bodies) == [entry_body(3, e, e - 1) for e in range(20)]


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill9"])
def test_fence_and_explicit_lac_persist_across_restart(bookie: BookieProcess, crash: bool) -> None:
    restart: Callable[[], object] = bookie.kill9 if crash else bookie.stop
    lac_body = LAC_HEADER.pack(4, 6) + b"lac-digest"
    for stub in stub_for(bookie):
        add_all(stub, 4, range(8))
        assert (
            stub.WriteLac(S.WriteLacRequest(ledger_id=4, lac=6, master_key=KEY, body=lac_body)).status
            == S.EOK
        )
        fenced = stub.ReadEntry(S.ReadRequest(ledger_id=4, entry_id=-1, flags=S.FENCE_LEDGER, master_key=KEY))
        assert fenced.status == S.EOK
        # a ledger fenced before the bookie ever saw an entry of it
        fresh = stub.ReadEntry(S.ReadRequest(ledger_id=5, entry_id=-1, flags=S.FENCE_LEDGER, master_key=KEY))
        assert fresh.status == S.ENOENTRY  # fenced, but no entry to return
    restart()
    bookie.start()
    for stub in stub_for(bookie):
        after = S.AddRequest(ledger_id=4, entry_id=8, master_key=KEY, body=entry_body(4, 8, 7))
        assert stub.AddEntry(after).status == S.EFENCED
        late = S.AddRequest(ledger_id=5, entry_id=0, master_key=KEY, body=entry_body(5, 0))
        assert stub.AddEntry(late).status == S.EFENCED
        recovery = S.AddRequest(
            ledger_id=4, entry_id=8, master_key=KEY, body=entry_body(4, 8, 7), flags=S.RECOVERY_ADD
        )
        assert stub.AddEntry(recovery).status == S.EOK
        lac = stub.ReadLac(S.ReadLacRequest(ledger_id=4))
        assert (lac.status, lac.lac_body) == (S.EOK, lac_body)
        assert stub.ReadEntry(S.ReadRequest(ledger_id=4, entry_id=0)).max_lac >= 6


def replayed_records(process: BookieProcess) -> int:
    found = re.findall(r"replayed (\d+) journal records", process.run_log_text())
    assert len(found) == 1, process.run_log_text()[-3000:]
    return int(found[0])


def test_clean_restart_replays_nothing_and_a_crash_replays_the_journal(bookie_factory: BookieFactory) -> None:
    bookie = bookie_factory(conf={"flushInterval": "3600000"})  # nothing is checkpointed on its own
    for stub in stub_for(bookie):
        add_all(stub, 6, range(30))
    bookie.kill9()
    bookie.start()
    assert replayed_records(bookie) >= 30  # the crash left the entries only in the journal
    bookie.stop()
    bookie.start()
    assert replayed_records(bookie) == 0  # SIGTERM flushed and checkpointed everything
    for stub in stub_for(bookie):
        r = stub.ReadEntries(S.ReadEntriesRequest(ledger_id=6, first_entry_id=0, max_count=100), timeout=10)
        assert list(r.bodies) == [entry_body(6, e, e - 1) for e in range(30)]


def test_a_second_bookie_on_a_taken_port_fails_clearly(bookie: BookieProcess, tmp_path: Path) -> None:
    # SO_REUSEPORT is off: the second bookie must not silently share the first one's port.
    proc = subprocess.run(
        [sys.executable, "-m", "pybk", "bookie", "--zk", "none", "--bind", "127.0.0.1",
         "--port", str(bookie.port), "--data-dir", str(tmp_path / "second")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{bookie.port}" in proc.stderr
    assert is_serving(bookie.address)
