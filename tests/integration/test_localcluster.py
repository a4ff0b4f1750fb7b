"""``pybk localcluster`` end to end: a real ZooKeeper and real bookies as the command's children,
driven with ``pybk shell``, stopped with SIGTERM (no process left behind), restarted on the same
data directory (ledgers written before are still readable).

The tests share one cluster and run in file order: the last ones stop and restart it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.localcluster import (
    BOOKIES,
    READY_LINE,
    LocalClusterRun,
    alive,
    running,
    shell,
)
from tests.support.ports import pick_ports

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterRun]:
    base = tmp_path_factory.mktemp("localcluster")
    zk_port, base_port = pick_ports(BOOKIES)
    with running(LocalClusterRun(base / "data", zk_port, base_port, base / "localcluster.out")) as run:
        yield run


def test_banner_says_what_runs_where(cluster: LocalClusterRun) -> None:
    out = cluster.output()
    assert cluster.zk_hosts in out
    for i in range(BOOKIES):
        assert f"127.0.0.1:{cluster.base_port + i}" in out
        assert f"http://127.0.0.1:{cluster.base_port + 100 + i}/metrics" in out
        assert f"add port {cluster.base_port + 200 + i}" in out
        socket.create_connection(("127.0.0.1", cluster.base_port + 200 + i), timeout=5).close()  # listening
        assert str(cluster.data_dir / "logs" / f"bookie-{i}.log") in out
    assert "self-check" in out and "wrote and read back" in out
    assert f"pybk shell --zk {cluster.zk_hosts}" in out
    # ZooKeeper (pybk zookeeper + its JVM) and every bookie run as descendants of localcluster.
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in cluster.children]
    assert any(b"ZooKeeperServerMain" in part for argv in commands for part in argv)
    assert sum(argv[1:4] == [b"-m", b"pybk", b"bookie"] for argv in commands) == BOOKIES
    assert sum(argv[1:4] == [b"-m", b"pybk", b"autorecovery"] for argv in commands) == 1
    assert f"http://127.0.0.1:{cluster.base_port + 99}/metrics" in out


def test_autorecovery_leads_and_serves_metrics(cluster: LocalClusterRun) -> None:
    url = f"http://127.0.0.1:{cluster.base_port + 99}/metrics"
    deadline = time.monotonic() + 30
    while True:  # it leads once its ZooKeeper session has campaigned
        with urllib.request.urlopen(url, timeout=10) as reply:
            if "autorecovery_leader 1.0" in reply.read().decode():
                break
        assert time.monotonic() < deadline, "autorecovery never led"
        time.sleep(0.2)
    assert shell(cluster.zk_hosts, "autorecovery") == {"enabled": True, "changed": False}
    info = shell(cluster.zk_hosts, "clusterinfo")
    assert info["auditorElected"] and info["writableBookiesCount"] == info["totalBookiesCount"] == BOOKIES
    text = shell(cluster.zk_hosts, "bookieinfo", as_json=False)
    assert text.returncode == 0 and "Total free disk space in the cluster:" in text.stdout
    per_bookie = [line for line in text.stdout.splitlines() if line.startswith("127.0.0.1:")]
    assert len(per_bookie) == BOOKIES and all("Free: " in line for line in per_bookie), text.stdout


def test_a_second_cluster_on_the_same_data_dir_is_refused(cluster: LocalClusterRun) -> None:
    zk_port, base_port = pick_ports(1)
    done = subprocess.run(
        [sys.executable, "-m", "pybk", "localcluster", "--bookies", "1", "--zk-port", str(zk_port),
         "--base-port", str(base_port), "--data-dir", str(cluster.data_dir)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "another pybk localcluster is using" in done.stderr


def test_bookies_serve_heartbeat_and_metrics(cluster: LocalClusterRun) -> None:
    for i in range(BOOKIES):
        base = f"http://127.0.0.1:{cluster.base_port + 100 + i}"
        with urllib.request.urlopen(f"{base}/heartbeat", timeout=10) as reply:
            assert reply.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert "# TYPE" in text


def test_listbookies_shows_every_bookie(cluster: LocalClusterRun) -> None:
    done = shell(cluster.zk_hosts, "listbookies", as_json=False)
    assert done.returncode == 0, done.stderr
    for i in range(BOOKIES):
        assert f"127.0.0.1:{cluster.base_port + i}" in done.stdout


def test_simpletest_then_inspect_read_and_delete(cluster: LocalClusterRun) -> None:
    result = shell(cluster.zk_hosts, "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "20")
    ledger_id = result["ledger_id"]
    assert result["entries"] == 20

    assert ledger_id in shell(cluster.zk_hosts, "listledgers")["ledgers"]
    with_meta = shell(cluster.zk_hosts, "listledgers", "-m")["ledgers"]
    assert any(item["ledger_id"] == ledger_id and item["state"] == "CLOSED" for item in with_meta)

    meta = shell(cluster.zk_hosts, "ledgermetadata", "-l", str(ledger_id))
    assert meta["ledger_id"] == ledger_id
    assert (meta["ensemble_size"], meta["write_quorum_size"], meta["ack_quorum_size"]) == (2, 2, 2)
    assert meta["state"] == "CLOSED" and meta["last_entry_id"] == 19
    assert len(meta["segments"][0]["bookies"]) == 2

    everything = shell(cluster.zk_hosts, "readledger", "-l", str(ledger_id))
    assert [e["entry_id"] for e in everything["entries"]] == list(range(20))
    some = shell(cluster.zk_hosts, "readledger", "-l", str(ledger_id), "-fe", "5", "-le", "7")
    assert [e["entry_id"] for e in some["entries"]] == [5, 6, 7]
    assert some["entries"] == everything["entries"][5:8]

    # No terminal to confirm on: deleting needs -f.
    refused = shell(cluster.zk_hosts, "deleteledger", "-l", str(ledger_id), as_json=False)
    assert refused.returncode == 2 and "-f" in refused.stderr
    assert ledger_id in shell(cluster.zk_hosts, "listledgers")["ledgers"]
    # Confirmation typed on stdin is accepted.
    declined = shell(cluster.zk_hosts, "deleteledger", "-l", str(ledger_id), as_json=False, stdin="n\n")
    assert declined.returncode == 1
    assert ledger_id in shell(cluster.zk_hosts, "listledgers")["ledgers"]
    assert shell(cluster.zk_hosts, "deleteledger", "-l", str(ledger_id), "-f")["deleted"] is True
    assert ledger_id not in shell(cluster.zk_hosts, "listledgers")["ledgers"]
    gone = shell(cluster.zk_hosts, "ledgermetadata", "-l", str(ledger_id), as_json=False)
    assert gone.returncode == 1 and f"ledger {ledger_id} has no metadata" in gone.stderr


def test_bookiesanity_and_lastmark(cluster: LocalClusterRun) -> None:
    sanity = shell(cluster.zk_hosts, "bookiesanity")
    assert sanity["ok"] is True and sanity["entries"] > 0
    marks = shell(cluster.zk_hosts, "lastmark")["bookies"]
    assert {m["bookie_id"] for m in marks} == {f"127.0.0.1:{cluster.base_port + i}" for i in range(BOOKIES)}
    assert all(m["journal_id"] >= 0 and m["offset"] >= 0 for m in marks)


def test_dead_child_is_reported_then_sigterm_stops_everything_and_data_survives_restart(
    cluster: LocalClusterRun,
) -> None:
    kept = shell(cluster.zk_hosts, "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "7")["ledger_id"]
    before = shell(cluster.zk_hosts, "readledger", "-l", str(kept))["entries"]
    assert len(before) == 7

    # A bookie dying under localcluster is reported with its name, exit and log.
    victim = next(
        pid for pid in cluster.children
        if f"--port\0{cluster.base_port + 1}\0" in Path(f"/proc/{pid}/cmdline").read_text()
    )
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "WARNING: bookie-1" not in cluster.output():
        assert time.monotonic() < deadline, cluster.output()
        time.sleep(0.2)
    report = cluster.output().split(READY_LINE, 1)[1]
    assert f"bookie-1 (pid {victim}) was killed by SIGKILL" in report
    assert str(cluster.data_dir / "logs" / "bookie-1.log") in report

    # SIGTERM: exit 0, and not one of its processes (ZooKeeper's JVM included) is left.
    children = set(cluster.children)
    assert cluster.stop() == 0, cluster.output()
    assert "stopped" in cluster.output()
    left = [pid for pid in children if alive(pid)]
    assert not left, f"processes left behind: {left}"

    # Same data dir: same cluster, same ledgers.
    cluster.start()
    assert "existing metadata kept" in cluster.output()
    after = shell(cluster.zk_hosts, "readledger", "-l", str(kept))["entries"]
    assert after == before
    assert cluster.stop() == 0


def test_bad_arguments_exit_2_with_a_message(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pybk", "localcluster", "--bookies", "0", "--data-dir", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "--bookies" in done.stderr


def test_busy_port_fails_fast_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pybk", "localcluster", "--bookies", "1", "--zk-port", str(port),
             "--base-port", str(pick_ports(1)[1]), "--data-dir", str(tmp_path)],
            check=False, capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert f"{port}" in done.stderr and "in use" in done.stderr
