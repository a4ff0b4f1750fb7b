"""``pybk shell`` cluster commands against a real ZooKeeper."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from bkmeta import BookieServiceInfo
from pybk.main import main

pytestmark = pytest.mark.integration



def run_json(capsys: pytest.CaptureFixture[str], zk_hosts: str, *argv: str) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    rc = main(["shell", "--zk", zk_hosts, "--json", *argv])
    out = capsys.readouterr().out.strip().splitlines()
    return rc, json.loads(out[-1])


@pytest.fixture
def kazoo(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_initnewcluster_is_idempotent(capsys: pytest.CaptureFixture[str], zk_hosts: str) -> None:
    rc, first = run_json(capsys, zk_hosts, "initnewcluster")
    assert rc == 0 and first["created"] is True
    rc, second = run_json(capsys, zk_hosts, "initnewcluster")
    assert rc == 0 and second["created"] is False and second["instance_id"] == first["instance_id"]


def test_initnewcluster_refuses_other_layout(
    capsys: pytest.CaptureFixture[str], zk_hosts: str, kazoo: KazooClient
) -> None:
    flat = b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1"
    kazoo.create("/ledgers/LAYOUT", flat, makepath=True)
    capsys.readouterr()
    assert main(["shell", "--zk", zk_hosts, "initnewcluster"]) == 1
    assert "refusing" in capsys.readouterr().err


def test_listbookies(capsys: pytest.CaptureFixture[str], zk_hosts: str, kazoo: KazooClient) -> None:
    assert main(["shell", "--zk", zk_hosts, "initnewcluster"]) == 0
    rw = BookieServiceInfo(
        "127.0.0.1:3181", "127.0.0.1", 3181, "127.0.0.1", 8080, rack="/rack1",
        add_port=3190, add_port_reads=True,
    )  # fmt: skip
    ro = BookieServiceInfo.for_address("127.0.0.1", 3182)
    kazoo.create("/ledgers/available/127.0.0.1:3181", rw.to_bytes(), ephemeral=True)
    kazoo.create("/ledgers/available/readonly/127.0.0.1:3182", ro.to_bytes(), ephemeral=True)

    rc, everything = run_json(capsys, zk_hosts, "listbookies")
    assert rc == 0
    assert everything["readwrite"] == [
        {
            "bookie_id": "127.0.0.1:3181",
            "grpc": "127.0.0.1:3181",
            "add": "127.0.0.1:3190",
            "reads": "add",
            "http": "127.0.0.1:8080",
            "rack": "/rack1",
        }
    ]
    assert [b["bookie_id"] for b in everything["readonly"]] == ["127.0.0.1:3182"]  # type: ignore[union-attr]
    assert [b["reads"] for b in everything["readonly"]] == ["grpc"]  # type: ignore[union-attr]  # no add port
    rc, only_rw = run_json(capsys, zk_hosts, "listbookies", "-rw")
    assert set(only_rw) == {"readwrite"}
    rc, only_ro = run_json(capsys, zk_hosts, "listbookies", "-ro")
    assert set(only_ro) == {"readonly"}

    capsys.readouterr()
    assert main(["shell", "--zk", zk_hosts, "listbookies"]) == 0
    text = capsys.readouterr().out
    assert "ReadWrite Bookies (1):" in text and "Readonly Bookies (1):" in text and "rack=/rack1" in text
    assert "add=127.0.0.1:3190" in text and "add=-" in text  # the read-only one has none


def test_nukeexistingcluster(capsys: pytest.CaptureFixture[str], zk_hosts: str, kazoo: KazooClient) -> None:
    assert main(["shell", "--zk", zk_hosts, "initnewcluster"]) == 0
    capsys.readouterr()
    assert main(["shell", "--zk", zk_hosts, "nukeexistingcluster"]) == 1  # neither --force nor id
    assert kazoo.exists("/ledgers/LAYOUT") is not None
    rc, result = run_json(capsys, zk_hosts, "nukeexistingcluster", "--force")
    assert rc == 0 and result["deleted"] is True
    assert kazoo.exists("/ledgers") is None


def test_commands_on_missing_cluster_say_so(capsys: pytest.CaptureFixture[str], zk_hosts: str) -> None:
    capsys.readouterr()
    assert main(["shell", "--zk", zk_hosts, "listbookies"]) == 1
    assert "initnewcluster" in capsys.readouterr().err
