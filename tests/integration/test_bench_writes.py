"""``pybk bench writes`` end to end: the warm-up is written on ledgers of its own and kept out of
the report, the measured entries all land, and both phases close their ledgers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

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
    assert result["latency_samples"] == 300
    assert sum(row["ops"] for row in result["per_second"]) == 300  # the series covers every add
    assert result["coordinated_omission"] == "not paced"

    closed = {}
    for ledger_id in await bk.list_ledgers():
        meta = await bk.ledger_metadata(ledger_id)
        assert meta.state == LedgerState.CLOSED
        closed[ledger_id] = meta.last_entry_id
    warmup_ledger, measured_ledger = sorted(closed)  # ids grow: the warm-up's ledger came first
    assert (closed[warmup_ledger], closed[measured_ledger]) == (199, 299)


async def test_a_paced_run_reports_latency_from_the_scheduled_send_and_draws_it(
    client_cluster: ClientCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    await client_cluster.client()
    capsys.readouterr()
    picture = tmp_path / "writes.png"
    argv = (f"bench writes --zk {client_cluster.zk_hosts} --entries 400 --warmup 0 --rate 400"
            f" --json --plot {picture}").split()
    assert await asyncio.to_thread(main, argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["coordinated_omission"] == "corrected"
    # from the scheduled send: never shorter than from the actual one
    assert result["latency_ms"]["max"] >= result["service_latency_ms"]["max"]
    assert len(result["per_second"]) >= 1
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
