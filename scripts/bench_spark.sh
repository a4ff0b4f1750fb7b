#!/usr/bin/env bash
# `pybk bench spark` against a fresh `pybk localcluster` (real ZooKeeper + 3 bookies, fsync on),
# counting the cluster's CPU too.
# Usage: scripts/bench_spark.sh [MB] [pybk bench spark flags: --json, --partitions N, ...]
set -u
cd "$(dirname "$0")/.."
PYBK=${PYBK:-.venv/bin/pybk}
. scripts/local_cluster.sh
start_local_cluster pybk-bench-spark
host_speed  # the figures move with it (scripts/local_cluster.sh): printed before and after
# shellcheck disable=SC2086  # PYBK may be "python -m pybk"
$PYBK bench spark --zk 127.0.0.1:${ZK_PORT:-22181} --cluster-pid "$LC" --mb "${1:-200}" "${@:2}"
status=$?
host_speed
exit $status
