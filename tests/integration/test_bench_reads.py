"""``pybk bench reads`` end to end: it writes its ledger, reads every entry back (striped or
not), and says how long the first one took and how the single reads went."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster

from pybk.main import main

__all__ = ["client_cluster"]  # the shared cluster fixture, re-exported for pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("qw", "calls"), [(3, "chunks"), (2, "strided chunks")])
async def test_bench_reads_reads_back_every_entry_it_wrote(
    client_cluster: ClientCluster, capsys: pytest.CaptureFixture[str], qw: int, calls: str
) -> None:
    await client_cluster.client()  # waits until all three bookies are writable
    capsys.readouterr()
    hosts = client_cluster.zk_hosts
    argv = f"bench reads --zk {hosts} --entries 5000 -w {qw} --size 256 --samples 20 --json".split()
    assert await asyncio.to_thread(main, argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["entries"] == 5000 and result["errors"] == 0
    assert (result["write_quorum"], result["read_calls"]) == (qw, calls)
    assert 0 < result["first_entry_ms"] <= result["elapsed_s"] * 1000.0
    assert result["latency_samples"] == 20
