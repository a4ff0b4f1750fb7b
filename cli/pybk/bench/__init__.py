"""``pybk bench <target>``: benchmarks that print throughput and latency percentiles.

Each target lives in its own module with ``register(subparsers)``; all report through
:mod:`pybk.bench.report` so ``--json`` has one shape everywhere (design §7).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

BENCH_MODULES: tuple[str, ...] = (
    "pybk.bench.writes",
    "pybk.bench.bookie",
    "pybk.bench.reads",
    "pybk.bench.tail",
    "pybk.bench.metadata",
    "pybk.bench.journal_disk",
    "pybk.bench.auditcheck",
    "pybk.bench.rereplicate",
)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run a benchmark (bookie, writes, reads, tail, metadata, journal-disk, auditcheck, rereplicate)",
    )
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for name in BENCH_MODULES:
        importlib.import_module(name).register(targets)
