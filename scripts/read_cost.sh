#!/usr/bin/env bash
# The catch-up read's CPU per entry in the client and in the bookies (docs/performance.md,
# "Catch-up reads"): a fresh `pybk localcluster` (ZooKeeper + 3 bookies), `pybk bench reads` to
# write a closed ledger (its own figure is a read made while the bookies still flush that ledger),
# then `scripts/read_cost.py range` reads it TIMES more times. Usage: scripts/read_cost.sh [QW] [TIMES]
# QW 3 (default): every bookie holds every entry; 2: striped. ZK_PORT and BASE_PORT move the
# cluster off its default ports (scripts/local_cluster.sh).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PYBK=${PYBK:-"$PYTHON -m pybk"}
. scripts/local_cluster.sh
start_local_cluster pybk-read-cost
host_speed
ZK=127.0.0.1:${ZK_PORT:-22181}
# shellcheck disable=SC2086  # PYBK may be "python -m pybk"
BENCH=$($PYBK bench reads --zk "$ZK" --entries 100000 -w "${1:-3}" --json)
echo "$BENCH"
LEDGER=$(echo "$BENCH" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["ledger_id"])')
"$PYTHON" scripts/read_cost.py range --zk "$ZK" --ledger "$LEDGER" --data-dir "$D" --times "${2:-5}"
