"""scripts/bench_summary.py: the issue's table from several bench_cluster.sh outputs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench_summary.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_output(max_eps: float, reads: dict[str, float] | None, speed: float, rss_kb: int) -> str:
    lines = [f"== host speed: a 10M-step Python loop took {speed} s",
             "== bench writes (max)", json.dumps({"throughput_eps": max_eps, "latency_ms": {"p99": 9.0}})]
    if reads is not None:
        lines += ["== bench reads", json.dumps({"throughput_eps": reads["eps"]})]
    lines += ["== bench reads (striped, E3 Qw2)", "{truncated",
              f"bookie pid 1 VmRSS {rss_kb} kB", "bookie pid 2 VmRSS 1024 kB"]
    return "\n".join(lines) + "\n"


def test_rows_give_min_median_max_over_the_runs_that_have_the_figure(tmp_path: Path) -> None:
    summary = _load()
    runs = [
        _run_output(30_000, {"eps": 100_000}, 0.5, 200 * 1024),
        _run_output(50_000, None, 0.7, 300 * 1024),
        _run_output(40_000, {"eps": 80_000}, 0.6, 250 * 1024),
    ]
    paths = []
    for i, text in enumerate(runs):
        paths.append(tmp_path / f"run{i}.txt")
        paths[-1].write_text(text)
    rows = {r["figure"]: r["spread"] for r in summary.summarise(
        [summary.parse_run(p.read_text()) for p in paths])}

    writes = rows["3 bookies E3 Qw2 Qa2, max entries/s"]
    assert writes == {"min": 30_000, "median": 40_000, "max": 50_000, "runs": 3}
    reads = rows["catch-up read, closed ledger, Qw3"]
    assert reads == {"min": 80_000, "median": 90_000, "max": 100_000, "runs": 2}
    assert rows["catch-up read, striped Qw2"] is None  # its JSON line was cut: no figure, not a zero
    assert rows["largest bookie RSS at the end"]["max"] == 300
    assert rows["host speed (10M-step loop; lower is faster)"]["runs"] == 3
    table = summary.markdown(summary.summarise([summary.parse_run(p.read_text()) for p in paths]))
    row = "| 3 bookies E3 Qw2 Qa2, max entries/s | 30,000 / 40,000 / 50,000 | entries/s | 3 | >= 100,000 |"
    assert row in table
