"""The shell's tools for a bookie's own files, on a real bookie process: ``localconsistencycheck``,
``rebuild-db-ledger-locations-index`` and ``rebuild-db-ledgers-index``. A bookie whose location
or ledger index is lost refuses to start (rather than answer "no such entry" for everything),
the rebuilds bring every entry back (the ledgers fenced), and the check names a damaged entry."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from tests.support.bookies import BookieFactory, BookieProcess, BookieStartError, entry_body

from bkproto.entry_format import HEADER_SIZE, LAC_HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.storage.entry_logger import LOG_HEADER_SIZE, RECORD_HEADER_SIZE, log_name

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"k" * 20
LEDGERS = (10, 11)  # 10 % 2 == 0 -> ledgers0, 11 -> ledgers1
ENTRIES = 300


def shell(
    bookie: BookieProcess, *args: str, zk: str | None = "127.0.0.1:1"
) -> subprocess.CompletedProcess[str]:
    """A command as an operator runs it on the bookie's host, with the bookie's configuration
    (and, for these tools, a ZooKeeper nobody answers at: they must not need one)."""
    return subprocess.run(
        [sys.executable, "-m", "pybk", "shell", *(["--zk", zk] if zk else []), "--json", *args,
         "--conf", str(bookie.conf_path),
         "--journal-dirs", ",".join(map(str, bookie.journal_dirs)),
         "--ledger-dirs", ",".join(map(str, bookie.ledger_dirs))],
        check=False, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def write(bookie: BookieProcess, payloads: dict[tuple[int, int], bytes]) -> None:
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for (ledger_id, entry_id), body in payloads.items():
            reply = stub.AddEntry(
                S.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=KEY, body=body), timeout=30
            )
            assert reply.status == S.EOK


def read_back(bookie: BookieProcess, payloads: dict[tuple[int, int], bytes]) -> None:
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for (ledger_id, entry_id), body in payloads.items():
            reply = stub.ReadEntry(S.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=30)
            assert reply.status == S.EOK and reply.body == body, (ledger_id, entry_id)


def damage_first_body(log: Path) -> None:
    """Flip one payload byte of the log's first entry. Inverted, not overwritten: writing 0xff
    over a random payload byte left the log intact in about one run of 256 (it failed CI once)."""
    with open(log, "r+b") as f:
        f.seek(LOG_HEADER_SIZE + RECORD_HEADER_SIZE + 40)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def test_a_lost_location_index_is_refused_then_rebuilt_and_a_damaged_entry_is_named(
    bookie_factory: BookieFactory,
) -> None:
    bookie = bookie_factory()
    payloads = {
        (ledger_id, entry_id): entry_body(ledger_id, entry_id, entry_id - 1, os.urandom(500))
        for ledger_id in LEDGERS for entry_id in range(ENTRIES)
    }  # fmt: skip
    write(bookie, payloads)

    busy = shell(bookie, "rebuild-db-ledger-locations-index")
    assert busy.returncode == 1 and "running bookie" in json.dumps(json.loads(busy.stdout)["failed"])
    busy = shell(bookie, "localconsistencycheck")  # its flushes would change files under the check
    assert busy.returncode == 1 and "stop the bookie first" in busy.stderr
    assert bookie.stop() == 0  # a clean stop flushes everything into entry logs and indexes
    checked = shell(bookie, "localconsistencycheck")
    assert checked.returncode == 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["ok"] and sum(d["entries_checked"] for d in report["directories"]) == 2 * ENTRIES

    lost = bookie.ledger_dirs[0] / "current" / "locations"
    for path in lost.iterdir():
        path.unlink()
    lost.rmdir()
    with pytest.raises(BookieStartError):
        bookie.start(60.0)
    assert "rebuild-db-ledger-locations-index" in bookie.run_log_text()
    checked = shell(bookie, "localconsistencycheck")
    assert checked.returncode == 1
    directories = json.loads(checked.stdout)["directories"]
    unindexed = {d["directory"]: d["unindexed_entries"] for d in directories}
    first, second = (str(d.resolve()) for d in bookie.ledger_dirs)
    assert unindexed == {first: ENTRIES, second: 0}

    rebuilt = shell(bookie, "rebuild-db-ledger-locations-index")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert sum(d["entries_indexed"] for d in json.loads(rebuilt.stdout)["directories"]) == 2 * ENTRIES
    bookie.start()
    read_back(bookie, payloads)
    assert bookie.stop() == 0

    log = bookie.ledger_dirs[1] / "current" / log_name(0)  # ledger 11's first entry leads it
    damage_first_body(log)
    damaged = shell(bookie, "localconsistencycheck")
    assert damaged.returncode == 1
    problems = [p for d in json.loads(damaged.stdout)["directories"] for p in d["problems"]]
    assert any("entry 11/0" in p and "checksum" in p for p in problems), problems


def test_a_lost_ledger_index_is_rebuilt_with_every_ledger_fenced(bookie_factory: BookieFactory) -> None:
    bookie = bookie_factory()
    payloads = {
        (ledger_id, entry_id): entry_body(ledger_id, entry_id, entry_id - 1, os.urandom(200))
        for ledger_id in LEDGERS for entry_id in range(50)
    }  # fmt: skip
    write(bookie, payloads)
    busy = shell(bookie, "rebuild-db-ledgers-index")
    assert busy.returncode == 1 and "running bookie" in json.dumps(json.loads(busy.stdout)["failed"])
    assert bookie.stop() == 0

    shutil.rmtree(bookie.ledger_dirs[0] / "current" / "ledgers")
    with pytest.raises(BookieStartError):  # rather than answering "no such ledger" for ledger 10
        bookie.start(60.0)
    assert "rebuild-db-ledgers-index" in bookie.run_log_text()
    rebuilt = shell(bookie, "rebuild-db-ledgers-index")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    directories = json.loads(rebuilt.stdout)["directories"]
    assert [d["ledgers"] for d in directories] == [1, 1]  # 10 in the first, 11 in the second
    assert directories[1]["backup"] is not None  # the intact one is rebuilt too, and kept

    bookie.start()
    read_back(bookie, payloads)
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for ledger_id in LEDGERS:  # fenced: whether a fence was served is not in the entry logs
            reply = stub.AddEntry(S.AddRequest(
                ledger_id=ledger_id, entry_id=50, master_key=KEY, body=entry_body(ledger_id, 50, 49, b"x")
            ), timeout=30)  # fmt: skip
            assert reply.status == S.EFENCED, ledger_id
    assert bookie.stop() == 0


async def test_tools_refuse_unknown_configuration(bookie_factory: BookieFactory) -> None:
    bookie = await asyncio.to_thread(bookie_factory)
    bookie.write_conf({"noSuchKey": "1"})
    done = await asyncio.to_thread(shell, bookie, "localconsistencycheck")
    assert done.returncode == 2 and "noSuchKey" in done.stderr


def test_journal_and_entry_log_records_read_back_as_written(bookie_factory: BookieFactory) -> None:
    bookie = bookie_factory()
    payloads = {
        (ledger_id, entry_id): entry_body(ledger_id, entry_id, entry_id - 1, b"data %d" % entry_id)
        for ledger_id in LEDGERS for entry_id in range(5)
    }  # fmt: skip
    write(bookie, payloads)
    lac_body = LAC_HEADER.pack(11, 3) + b"lac-digest"
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        lac = S.WriteLacRequest(ledger_id=11, lac=3, master_key=KEY, body=lac_body)
        assert stub.WriteLac(lac).status == S.EOK
        fence = S.ReadRequest(ledger_id=11, entry_id=-1, flags=S.FENCE_LEDGER, master_key=KEY)
        assert stub.ReadEntry(fence).status == S.EOK
    assert bookie.stop() == 0

    listing = json.loads(shell(bookie, "listfilesondisc").stdout)
    assert [Path(f["path"]).name for f in listing["journal_files"]] == ["0000000000000001.txn"]
    assert {Path(f["path"]).parent.parent for f in listing["entry_logs"]} == set(bookie.ledger_dirs)
    indexes = sorted(Path(f["path"]).name for f in listing["index_dirs"])
    assert indexes == ["ledgers", "ledgers", "locations", "locations"]

    journal = json.loads(shell(bookie, "readjournal", "1", "-m").stdout)
    assert journal["end"] == "clean"
    records = journal["records"]
    entries = [(r["ledger_id"], r["entry_id"], r["last_add_confirmed"], bytes.fromhex(r["data"]))
               for r in records if r["type"] == "entry"]
    assert entries == [(lid, eid, eid - 1, body[HEADER_SIZE:]) for (lid, eid), body in payloads.items()]
    assert [r["ledger_id"] for r in records if r["type"] == "master_key"] == list(LEDGERS)
    assert bytes.fromhex(next(r for r in records if r["type"] == "master_key")["data"]) == KEY
    lacs = [(r["ledger_id"], r["last_add_confirmed"]) for r in records if r["type"] == "explicit_lac"]
    assert lacs == [(11, 3)]
    assert [r["type"] for r in records][-1] == "fence" and records[-1]["ledger_id"] == 11

    ambiguous = shell(bookie, "readlog", "0")  # both ledger dirs have a log 0
    assert ambiguous.returncode == 2 and "more than one" in ambiguous.stderr
    log = bookie.ledger_dirs[0] / "current" / log_name(0)
    one = json.loads(shell(bookie, "readlog", str(log), "-l", "10", "-e", "3", "-m").stdout)
    found = [(r["entry_id"], bytes.fromhex(r["data"])) for r in one["records"]]
    assert found == [(3, payloads[10, 3][HEADER_SIZE:])]
    metadata = json.loads(shell(bookie, "readlogmetadata", str(log)).stdout)
    assert metadata["from_ledger_map"] and list(metadata["ledgers"]) == ["10"]

    damage_first_body(log)  # entry 10/0's
    damaged = shell(bookie, "readlog", str(log))
    assert damaged.returncode == 1
    report = json.loads(damaged.stdout)
    assert report["damaged"] == 1 and "checksum" in report["records"][0]["problem"]
    assert len(report["records"]) == 5  # the others still read


def test_a_format_leaves_no_journal_mark_behind_and_spares_a_running_bookie(
    bookie_factory: BookieFactory,
) -> None:
    # Unregistered (zkServers=none): no cookie, no ZooKeeper; the directories' locks are the guard.
    bookie = bookie_factory(conf={"zkServers": "none"})
    write(bookie, {(10, 0): entry_body(10, 0, -1, b"old")})
    running = shell(bookie, "bookieformat", "-f", zk=None)
    assert running.returncode == 1 and "running bookie" in running.stderr
    assert (bookie.ledger_dirs[0] / "current").is_dir()
    for _ in range(3):  # each start opens a new journal file: the mark names journal 3 or later
        bookie.stop()
        bookie.start()
    bookie.stop()
    assert list(bookie.ledger_dirs[0].glob("lastMark*"))

    formatted = shell(bookie, "bookieformat", "-f", zk=None)
    assert formatted.returncode == 0, formatted.stderr
    assert not list(bookie.ledger_dirs[0].glob("lastMark*"))
    assert not (bookie.ledger_dirs[0] / "current").exists()
    bookie.start()  # journal 1 again: a mark left behind would skip it at the next replay
    fresh = {(10, e): entry_body(10, e, e - 1, b"new %d" % e) for e in range(10)}
    write(bookie, fresh)
    bookie.kill9()
    bookie.start()
    read_back(bookie, fresh)


def test_a_directory_that_is_not_a_bookies_is_left_alone(tmp_path: Path) -> None:
    current = tmp_path / "data" / "current"
    current.mkdir(parents=True)
    (current / "notes.txt").write_text("someone else's")
    args = [sys.executable, "-m", "pybk", "shell", "bookieformat", "-f",
            "--journal-dirs", str(tmp_path / "data"), "--ledger-dirs", str(tmp_path / "data")]
    for _ in range(2):  # the first run must not leave anything that would let the second through
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False,
                              env=dict(os.environ, BK_zkServers="none"))
        assert done.returncode == 1 and "holds no bookie file" in done.stderr
    assert [p.name for p in current.iterdir()] == ["notes.txt"]
