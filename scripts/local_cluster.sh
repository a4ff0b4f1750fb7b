# Sourced by the benchmark scripts: a fresh `pybk localcluster` (ZooKeeper on ZK_PORT, default
# 22181, 3 bookies from BASE_PORT, default 23181) in its own temporary directory, stopped and
# removed when the script exits. PYBK is the command (default .venv/bin/pybk).
# start_local_cluster PREFIX [localcluster flags...] sets D (the data directory) and LC (the
# localcluster pid); stop_local_cluster stops it early (the next start needs the ports).

start_local_cluster() {
  D=$(mktemp -d "/tmp/$1.XXXX")
  shift
  # shellcheck disable=SC2086  # PYBK may be "python -m pybk"
  ${PYBK:-.venv/bin/pybk} localcluster --bookies 3 --zk-port "${ZK_PORT:-22181}" --base-port "${BASE_PORT:-23181}" \
    --data-dir "$D" "$@" > "$D/localcluster.log" 2>&1 &
  LC=$!
  trap stop_local_cluster EXIT
  for _ in $(seq 1 120); do grep -q "pybk shell" "$D/localcluster.log" 2>/dev/null && break; sleep 1; done
  # A cluster already on these ports would make localcluster exit, and the benchmarks would then
  # measure that other cluster: refuse instead.
  if ! kill -0 "$LC" 2>/dev/null || ! grep -q "pybk shell" "$D/localcluster.log"; then
    echo "local cluster did not start (ports ${ZK_PORT:-22181}/${BASE_PORT:-23181}... busy?):" >&2
    tail -5 "$D/localcluster.log" >&2
    exit 1
  fi
}

stop_local_cluster() {
  [ -n "${LC:-}" ] || return 0
  kill -TERM "$LC" 2>/dev/null
  wait "$LC"
  rm -rf "$D"
  LC=
}

# The host's CPU speed: on a shared VM it has been seen to vary by 2x within an hour, and every
# figure a benchmark prints moves with it. PYTHON is the interpreter (default .venv/bin/python).
host_speed() {
  ${PYTHON:-.venv/bin/python} - <<'PY'
import time
t = time.perf_counter()
s = 0
for i in range(10_000_000):
    s += i
print(f"== host speed: a 10M-step Python loop took {time.perf_counter() - t:.2f} s")
PY
}
