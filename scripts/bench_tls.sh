#!/usr/bin/env bash
# TLS against plaintext in the same run: `pybk bench writes` and `pybk bench reads` against a fresh
# `pybk localcluster` (3 bookies), once plaintext and once with --tls (mutual TLS and the mtls
# authentication provider on every listener), alternating for ROUNDS rounds so that the shared
# host's drift hits both alike. One JSON line per benchmark, prefixed with the mode.
# Usage: scripts/bench_tls.sh [ROUNDS] (default 3). Environment: PYTHON (default .venv/bin/python),
# ZK_PORT and BASE_PORT (default 52181 and 53181, away from bench_cluster.sh's).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ROUNDS=${1:-3}
ZK_PORT=${ZK_PORT:-52181}
BASE_PORT=${BASE_PORT:-53181}
ZK=127.0.0.1:$ZK_PORT
PYBK="$PY -m pybk"
export ZK_PORT BASE_PORT
. scripts/local_cluster.sh

for round in $(seq 1 "$ROUNDS"); do
  for mode in plain tls; do
    unset PYBK_CLIENT_CONF  # before starting: localcluster's own clients read it too
    if [ "$mode" = tls ]; then start_local_cluster pybk-bench-tls --tls; export PYBK_CLIENT_CONF=$D/tls/client.conf
    else start_local_cluster pybk-bench-tls; fi
    echo "round $round $mode writes $("$PY" -m pybk bench writes --zk "$ZK" --time 10 --json)"
    echo "round $round $mode reads $("$PY" -m pybk bench reads --zk "$ZK" --entries 100000 --json)"
    stop_local_cluster
  done
done
