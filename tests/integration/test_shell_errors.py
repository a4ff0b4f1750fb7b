"""``pybk shell`` exit codes a script can trust: 2 for bad arguments, 3 when ZooKeeper cannot be
reached, 1 when the operation itself fails (no cluster, no such ledger), each with a clear message
on stderr and, with ``--json``, one JSON object on stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bkmeta.zookeeper_server import free_port

pytestmark = pytest.mark.integration


def pybk_shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pybk", "shell", *args],
        check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["readledger"], "-l/--ledgerid"),
        (["readledger", "-l", "abc"], "invalid"),
        (["ledgermetadata", "-l", "-5"], "must be >= 0"),
        (["simpletest", "-n", "0"], "must be >= 1"),
        (["listledgers", "--bogus"], "unrecognized arguments"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_before_touching_zookeeper(args: list[str], needle: str) -> None:
    # Port 1 is never a ZooKeeper: exit 2 proves the arguments were refused first.
    done = pybk_shell("--zk", "127.0.0.1:1", *args)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr


def test_inconsistent_values_exit_2_with_the_reason(zk_hosts: str) -> None:
    done = pybk_shell("--zk", zk_hosts, "simpletest", "-e", "1", "-w", "2", "-a", "2")
    assert done.returncode == 2
    assert "ensemble >= write quorum >= ack quorum" in done.stderr
    done = pybk_shell("--zk", zk_hosts, "readledger", "-l", "1", "-fe", "5", "-le", "2")
    assert done.returncode == 2
    assert "-le 2 is before -fe 5" in done.stderr


@pytest.mark.parametrize("command", [["listledgers"], ["ledgermetadata", "-l", "1"], ["lastmark"]])
def test_unreachable_zookeeper_exits_3(command: list[str]) -> None:
    hosts = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = pybk_shell("--zk", hosts, "--json", *command)
    assert done.returncode == 3, done.stderr
    assert "unreachable" in done.stderr and hosts in done.stderr
    assert "unreachable" in json.loads(done.stdout)["error"]


def test_no_cluster_is_an_operation_failure_naming_initnewcluster(zk_hosts: str) -> None:
    done = pybk_shell("--zk", zk_hosts, "listledgers")
    assert done.returncode == 1
    assert "initnewcluster" in done.stderr


def test_missing_ledger_exits_1(zk_hosts: str) -> None:
    assert pybk_shell("--zk", zk_hosts, "initnewcluster").returncode == 0
    for command in (["ledgermetadata", "-l", "424242"], ["readledger", "-l", "424242"],
                    ["deleteledger", "-l", "424242", "-f"]):
        done = pybk_shell("--zk", zk_hosts, *command)
        assert done.returncode == 1, (command, done.stderr)
        assert "424242" in done.stderr
    listed = pybk_shell("--zk", zk_hosts, "--json", "listledgers")
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == {"ledgers": []}
