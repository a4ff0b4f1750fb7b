#!/usr/bin/env bash
# The measured cost model (docs/cost-model.md): a fresh `pybk localcluster` (ZooKeeper + 3 bookies),
# then scripts/cost_model.py: CPU µs per entry by stage in the client and in each bookie at max load.
# Usage: scripts/cost_model.sh [writes|bookie] [cost_model.py flags, e.g. --json]
#   writes (default): `pybk bench writes` (E3 Qw2 Qa2, 1 KiB) against the 3 bookies
#   bookie:           `pybk bench bookie` (pipelined, 1 KiB) against the first bookie alone
# BOOKIES (default 3) sets the cluster's size (with more than 3, pass --ledgers to spread the E3
# ensembles). Needs py-spy (`pip install py-spy`, in the dev extra); PYSPY names another one.
# ZK_PORT and BASE_PORT move the cluster off its default ports (scripts/local_cluster.sh).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PYBK=${PYBK:-"$PYTHON -m pybk"}
LOAD=${1:-writes}
[ $# -gt 0 ] && shift
. scripts/local_cluster.sh
start_local_cluster pybk-cost --bookies "${BOOKIES:-3}"  # the last --bookies wins
host_speed
"$PYTHON" scripts/cost_model.py --data-dir "$D" --zk "127.0.0.1:${ZK_PORT:-22181}" --load "$LOAD" \
  --pyspy "${PYSPY:-py-spy}" "$@"
