#!/usr/bin/env bash
# scripts/bench_spark.py against a fresh `pybk localcluster` (real ZooKeeper + 3 bookies, fsync on).
# Usage: scripts/bench_spark.sh [MB] [--json]
set -u
cd "$(dirname "$0")/.."
PYBK=${PYBK:-.venv/bin/pybk}
PY=${PY:-.venv/bin/python}
. scripts/local_cluster.sh
start_local_cluster pybk-bench-spark
$PY scripts/bench_spark.py --zk 127.0.0.1:${ZK_PORT:-22181} --mb "${1:-200}" "${@:2}"
