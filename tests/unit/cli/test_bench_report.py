from __future__ import annotations

import json

from pybk.bench.report import BenchResult, percentile


def test_percentile_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 99) == 0.0


def test_json_report_shape(capsys) -> None:  # type: ignore[no-untyped-def]
    BenchResult(entries=1000, errors=1, elapsed_s=2.0, entry_size=1024,
                latencies_ms=[1.0, 2.0, 3.0]).print(True, "x")
    d = json.loads(capsys.readouterr().out)
    assert d["throughput_eps"] == 500.0
    assert d["throughput_mbps"] == 0.51
    assert set(d["latency_ms"]) == {"p50", "p95", "p99", "p999", "max"}
    assert d["latency_ms"]["max"] == 3.0
