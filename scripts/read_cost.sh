#!/usr/bin/env bash
# The catch-up read's cost per entry (docs/cost-model.md, "Reads"): a fresh `pybk localcluster`
# (ZooKeeper + 3 bookies), then scripts/read_cost.py. Usage: scripts/read_cost.sh [read_cost.py flags]
# e.g. `scripts/read_cost.sh -w 2 --json` for a striped ledger. ZK_PORT and BASE_PORT move the
# cluster off its default ports (scripts/local_cluster.sh).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PYBK=${PYBK:-"$PYTHON -m pybk"}
. scripts/local_cluster.sh
start_local_cluster pybk-read-cost
"$PYTHON" scripts/read_cost.py --data-dir "$D" --zk "127.0.0.1:${ZK_PORT:-22181}" "$@"
