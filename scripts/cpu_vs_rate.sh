#!/usr/bin/env bash
# How busy the box is at each write rate: one fresh `pybk localcluster` (ZooKeeper + 3 bookies) per
# rate, `pybk bench writes --rate R` against it, and over the middle 6 s of the run the CPU of each
# bookie and of the client (% of one core), the whole box (% of all cores) and context switches/s.
# Usage: scripts/cpu_vs_rate.sh RATE...   (0 = unlimited)
#
# Why: on a shared 2-core box the write latency follows how busy the box is, and that hardly depends
# on the rate. Each stream message costs a fixed amount of CPU on both sides, and every thread
# wake-up comes with cold caches, so at low rates the many small messages cost as much as the
# entries do at high ones.
set -u
cd "$(dirname "$0")/.."
PYBK=.venv/bin/pybk
[ $# -gt 0 ] || { echo "usage: $0 RATE..." >&2; exit 2; }
. scripts/local_cluster.sh
box_ticks() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat; }
proc_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
for RATE in "$@"; do
  start_local_cluster pybk-cpu
  RATE_ARGS=(); [ "$RATE" = 0 ] || RATE_ARGS=(--rate "$RATE")
  $PYBK bench writes --zk 127.0.0.1:22181 --time 14 --warmup 2000 "${RATE_ARGS[@]}" --json > "$D/bench.json" &
  BENCH=$!
  sleep 5
  pids="$(pgrep -f "pybk bookie.*$D" | tr '\n' ' ')$BENCH"
  declare -A before=()
  for p in $pids; do before[$p]=$(proc_ticks "$p"); done
  read -r total0 idle0 < <(box_ticks)
  switches0=$(awk '/^ctxt/{print $2}' /proc/stat)
  sleep 6
  line=""
  for p in $pids; do line="$line $(( ($(proc_ticks "$p") - ${before[$p]}) * 100 / (6 * $(getconf CLK_TCK)) ))%"; done
  read -r total1 idle1 < <(box_ticks)
  switches1=$(awk '/^ctxt/{print $2}' /proc/stat)
  wait $BENCH
  figures=$(python3 - "$D/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
lat = d["latency_ms"]
print(f"{d['throughput_eps']:.0f} entries/s, p50 {lat['p50']} ms, p99 {lat['p99']} ms")
PY
)
  echo "rate $RATE: bookies+client CPU$line, box $(( 100 - (idle1 - idle0) * 100 / (total1 - total0) ))% busy, $(( (switches1 - switches0) / 6 )) context switches/s; $figures"
  stop_local_cluster
done
