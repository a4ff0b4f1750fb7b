"""Issue 32's table from several runs of scripts/bench_cluster.sh: min / median / max of each figure.

    for i in 1 2 3 4 5; do scripts/bench_cluster.sh > /tmp/bench-$i.txt 2>&1; done
    .venv/bin/python scripts/bench_summary.py /tmp/bench-*.txt [--json]

Each input is one run's output: "== name" lines, each followed by that benchmark's JSON line,
the host-speed lines and the bookies' RSS lines. A figure a run lacks (a benchmark that failed) is
left out of that row's statistics, and the row says over how many runs it is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Extract = Callable[[dict[str, Any]], float]

# (row label, benchmark header prefix, how to read the figure from its JSON, unit, goal)
ROWS: list[tuple[str, str, Extract, str, str]] = [
    ("3 bookies E3 Qw2 Qa2, max entries/s", "bench writes (max)",
     lambda d: d["throughput_eps"], "entries/s", ">= 100,000"),
    ("one bookie, pipelined (bench bookie)", "bench bookie",
     lambda d: d["throughput_eps"], "entries/s", ">= 150,000"),
    ("p99 add at half the max rate", "bench writes --rate",
     lambda d: d["latency_ms"]["p99"], "ms", "<= 10"),
    ("1 outstanding add p50", "bench writes (1 outstanding)",
     lambda d: d["latency_ms"]["p50"], "ms", "<= 0.5"),
    ("1 outstanding add p50, one bookie (bench bookie)", "bench bookie",
     lambda d: d["single_add_latency_ms"]["p50"], "ms", ""),
    ("writer ack -> tailing reader p99", "bench tail",
     lambda d: d["latency_ms"]["p99"], "ms", "<= 5"),
    ("catch-up read, closed ledger, Qw3", "bench reads",
     lambda d: d["throughput_eps"], "entries/s", ">= 200,000"),
    ("catch-up read, striped Qw2", "bench reads (striped",
     lambda d: d["throughput_eps"], "entries/s", ">= 200,000"),
    ("ledger creates", "bench metadata",
     lambda d: d["throughput_eps"], "per s", ">= 2,000"),
    ("metadata reads", "bench metadata",
     lambda d: d["read"]["throughput_eps"], "per s", ">= 10,000"),
    ("journal disk, 4 KiB fdatasync'ed writes", "bench journal-disk",
     lambda d: d["throughput_eps"], "per s", ""),
]

_HEADER = re.compile(r"^== (.*)$")
_SPEED = re.compile(r"a 10M-step Python loop took ([0-9.]+) s")
_RSS = re.compile(r"^bookie pid \d+ VmRSS (\d+) kB")


def parse_run(text: str) -> dict[str, Any]:
    """One run's benchmarks by header, its host speeds and its largest bookie RSS (MiB)."""
    benches: dict[str, dict[str, Any]] = {}
    speeds: list[float] = []
    rss: list[float] = []
    header: str | None = None
    for line in text.splitlines():
        if m := _SPEED.search(line):
            speeds.append(float(m.group(1)))
        elif m := _HEADER.match(line):
            header = m.group(1)
        elif m := _RSS.match(line):
            rss.append(int(m.group(1)) / 1024)
        elif header is not None and line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):  # a truncated line: that bench is missing
                benches[header] = json.loads(line)
            header = None
    return {"benches": benches, "host_speed_s": speeds, "max_bookie_rss_mib": max(rss, default=None)}


def figure(run: dict[str, Any], prefix: str, extract: Extract) -> float | None:
    for header, data in run["benches"].items():
        if header.startswith(prefix):
            try:
                return float(extract(data))
            except (KeyError, TypeError):
                return None
    return None


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {"min": min(got), "median": statistics.median(got), "max": max(got), "runs": len(got)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for label, prefix, extract, unit, goal in ROWS:
        rows.append({"figure": label, "unit": unit, "goal": goal,
                     "spread": spread(figure(r, prefix, extract) for r in runs)})
    rows.append({"figure": "largest bookie RSS at the end", "unit": "MiB", "goal": "<= caches + 200",
                 "spread": spread(r["max_bookie_rss_mib"] for r in runs)})
    rows.append({"figure": "host speed (10M-step loop; lower is faster)", "unit": "s", "goal": "",
                 "spread": spread(s for r in runs for s in r["host_speed_s"])})
    return rows


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| figure | min / median / max | unit | runs | goal |", "|---|---|---|---|---|"]
    for row in rows:
        s = row["spread"]
        cell = "-" if s is None else " / ".join(_fmt(s[k]) for k in ("min", "median", "max"))
        runs = 0 if s is None else s["runs"]
        out.append(f"| {row['figure']} | {cell} | {row['unit']} | {runs} | {row['goal']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("outputs", nargs="+", type=Path, help="outputs of scripts/bench_cluster.sh")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = parser.parse_args(argv)
    runs = [parse_run(p.read_text(errors="replace")) for p in args.outputs]
    rows = summarise(runs)
    print(json.dumps(rows) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
