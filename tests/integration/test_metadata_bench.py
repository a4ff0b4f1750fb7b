"""``pybk bench metadata`` runs end to end and reports the shared JSON shape; it leaves no trace."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from bkmeta.zookeeper_server import ZooKeeperServer
from pybk.main import main

pytestmark = pytest.mark.integration


def test_bench_metadata_json(capsys: pytest.CaptureFixture[str], zk_server: ZooKeeperServer) -> None:
    client = KazooClient(hosts=zk_server.hosts, timeout=10)
    client.start(timeout=15)
    try:
        before = set(client.get_children("/"))
        capsys.readouterr()
        assert main(["bench", "metadata", "--zk", zk_server.hosts, "--ops", "200", "--concurrency", "16",
                     "--json"]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert result["entries"] == 200 and result["errors"] == 0
        assert set(result["latency_ms"]) == {"p50", "p95", "p99", "p999", "max"}
        assert result["read"]["entries"] == 200 and result["read"]["errors"] == 0
        # First reads go to ZooKeeper (the creator does not fill the cache); re-reads do not.
        assert result["cache"]["read"] == {"hits": 0, "misses": 200}
        assert result["cache"]["reread"] == {"hits": 200, "misses": 0}
        assert result["reread_cached"]["entries"] == 200 and result["reread_cached"]["errors"] == 0
        assert result["delete"]["entries"] == 200
        assert set(client.get_children("/")) == before
    finally:
        client.stop()
        client.close()
