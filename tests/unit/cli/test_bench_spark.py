"""``pybk bench spark``: its command line, and the CPU accounting of a process tree it reports
per phase (the Spark run itself is measured by hand: docs/performance.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pybk.main import build_parser

pytest.importorskip("pyspark", reason="the spark extra is part of `make install`")

from pybk.bench.spark import process_tree_cpu  # after the skip: it needs the spark extra

# A child that burns this much CPU of its own, then waits for its stdin to close.
BURN = """
import sys, time
while time.process_time() < 0.5:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_the_command_line_parses() -> None:
    args = build_parser().parse_args(["bench", "spark", "--zk", "zk:2181", "--mb", "10", "--json"])
    assert (args.zk, args.mb, args.partitions, args.master, args.json) == ("zk:2181", 10, 2, "local[2]", True)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads Linux's /proc")
def test_cpu_of_a_process_tree_counts_a_live_child_and_not_the_root_itself() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        below = process_tree_cpu(os.getpid())
        assert below >= 0.5 - 0.02  # the child's 0.5 s, to /proc's tick
        assert process_tree_cpu(child.pid) == 0.0  # no descendants of its own
        assert process_tree_cpu(child.pid, descendants_only=False) >= 0.48
    finally:
        child.communicate("")
