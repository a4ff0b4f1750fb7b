#!/usr/bin/env bash
# Every benchmark of the issues against a fresh `pybk localcluster` (real ZooKeeper + 3 bookies),
# one JSON line each, then the bookies' RSS. Usage: scripts/bench_cluster.sh [HALF_RATE]
# HALF_RATE is the --rate for the "p99 at half the max rate" figure. By default it is half the
# throughput of the max run just before it: this shared box's speed drifts by tens of percent over
# a day, so a rate fixed once would mean a different load each time.
set -u
cd "$(dirname "$0")/.."
PYBK=${PYBK:-.venv/bin/pybk}
. scripts/local_cluster.sh
start_local_cluster pybk-bench
host_speed
ZK=127.0.0.1:${ZK_PORT:-22181}
B=127.0.0.1:${BASE_PORT:-23181}
echo "== bench journal-disk $D";   $PYBK bench journal-disk --dir "$D" --time 10 --json
echo "== bench bookie $B";            $PYBK bench bookie --bookie $B --zk $ZK --entries 200000 --latency-entries 3000 --json
echo "== bench writes (1 outstanding)"; $PYBK bench writes --zk $ZK --entries 3000 --throttle 1 --json
echo "== bench writes (max)";         MAX=$($PYBK bench writes --zk $ZK --time 10 --json); echo "$MAX"
HALF=${1:-$(echo "$MAX" | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["throughput_eps"] / 2))')}
echo "== bench writes --rate $HALF";  $PYBK bench writes --zk $ZK --time 10 --rate "$HALF" --json
echo "== bench reads";                $PYBK bench reads --zk $ZK --entries 100000 --json
echo "== bench reads (striped, E3 Qw2)"; $PYBK bench reads --zk $ZK --entries 100000 -w 2 --json
echo "== bench tail";                 $PYBK bench tail --zk $ZK --rate 1000 --time 10 --json
echo "== bench metadata";             $PYBK bench metadata --zk $ZK --ops 5000 --concurrency 64 --json
host_speed
for p in $(pgrep -f "pybk bookie.*$D"); do echo "bookie pid $p VmRSS $(awk '/VmRSS/{print $2, $3}' /proc/$p/status)"; done
