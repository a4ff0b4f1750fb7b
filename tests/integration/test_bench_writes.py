"""``pybk bench writes`` end to end: the warm-up is written on ledgers of its own and kept out of
the report, the measured entries all land, and both phases close their ledgers."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster

from bkclient import LedgerState
from pybk.main import main

__all__ = ["client_cluster"]  # the shared cluster fixture, re-exported for pytest

pytestmark = pytest.mark.integration


async def test_bench_writes_reports_only_the_measured_entries(
    client_cluster: ClientCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    bk = await client_cluster.client()  # waits until all three bookies are writable
    capsys.readouterr()
    hosts = client_cluster.zk_hosts
    argv = f"bench writes --zk {hosts} --entries 300 --warmup 200 --size 256 --json".split()
    assert await asyncio.to_thread(main, argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["entries"] == 300 and result["errors"] == 0
    assert result["warmup_entries"] == 200
    assert result["latency_ms"]["p50"] > 0

    closed = {}
    for ledger_id in await bk.list_ledgers():
        meta = await bk.ledger_metadata(ledger_id)
        assert meta.state == LedgerState.CLOSED
        closed[ledger_id] = meta.last_entry_id
    warmup_ledger, measured_ledger = sorted(closed)  # ids grow: the warm-up's ledger came first
    assert (closed[warmup_ledger], closed[measured_ledger]) == (199, 299)
