"""``pybk bench <target>``: benchmarks that print throughput and latency percentiles.

Each target lives in its own module with ``register(subparsers)``; all report through
:mod:`pybk.bench.report` so ``--json`` has one shape everywhere (design §7).
"""

from __future__ import annotations

import argparse
from typing import Any

from pybk.extras import register_commands
from pybk.json_option import add_json_option

# Module -> target name (known without importing it, for a target whose extra is missing).
BENCH_MODULES: dict[str, str] = {
    "pybk.bench.writes": "writes",
    "pybk.bench.bookie": "bookie",
    "pybk.bench.reads": "reads",
    "pybk.bench.tail": "tail",
    "pybk.bench.metadata": "metadata",
    "pybk.bench.journal_disk": "journal-disk",
    "pybk.bench.auditcheck": "auditcheck",
    "pybk.bench.rereplicate": "rereplicate",
    "pybk.bench.spark": "spark",
}


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run a benchmark (bookie, writes, reads, tail, metadata, journal-disk, auditcheck, "
        "rereplicate, spark)",
    )
    add_json_option(parser)
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    register_commands(targets, BENCH_MODULES)
    for target in targets.choices.values():  # every target prints one report
        add_json_option(target)
