"""The measured cost model of the add path: CPU microseconds per entry in the client and in each
bookie at max load, split by stage (docs/cost-model.md). Usage (a cluster: ``scripts/cost_model.sh``
starts a fresh one)::

    python scripts/cost_model.py --data-dir D --zk HOST:PORT [--load writes|bookie] [--json]

The load runs as a subprocess (``pybk bench writes --time ...`` against the cluster, or ``pybk bench
bookie`` against its first bookie). Two windows follow its start-up:

1. **CPU window**, no profiler attached: every thread's CPU time (``/proc/PID/task/TID/stat``) of the
   client and of each bookie, and each bookie's count of adds (``ADD_ENTRY_REQUEST`` on its metrics
   endpoint). CPU seconds over adds is the cost per entry; wall-clock throughput is not used, since
   the box is shared.
2. **Profile window**: ``py-spy record`` (``--threads``, raw collapsed stacks) on every process.
   Each Python thread's samples split its CPU time of window 1 into stages by the innermost frame
   that names one (rules below); threads py-spy does not see (gRPC's C core, RocksDB) are "native".

The load average is printed with every figure: on a shared box it says how far to trust them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
ADDS_METRIC = re.compile(r'^bookkeeper_server_ADD_ENTRY_REQUEST_count\{success="true"\} (\S+)$', re.M)

# Stage rules, most specific first: a stack's stage is that of its innermost frame matching one
# (substring of "function (file:line)"). Generic frames (the event loop's own) only count when no
# frame is specific.
CLIENT_STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("encode", ("DigestManager.", "_crc32", "AddRequestEncoder.", "varint (")),
    ("decode", ("AddPortCall.read", "FrameReader.", "FromString", "_read_ready", "data_received",
                "StreamReader.")),
    ("transport", ("AddStream._send_loop", "AddStream._take_batch", "AddPortCall.write", "frame (",
                   "StreamWriter.", "_SelectorSocketTransport.write", "AddPortCall._connected")),
    ("application", ("pybk/bench/", "hdrh/")),  # the benchmark: its loop, its latency histogram
    ("completion", ("_notify (", "_notify_all_acked", "EnsembleSlotListener.", "WriteHandle.adds_acked",
                    "WriteHandle.add_refused", "PendingAddOp.add_complete", "WriteHandle.add_completed",
                    "_release_completed", "PendingAddOp.succeed", "PendingAddOp._call_back",
                    "AddStream._recv_loop")),
    ("submit", ("WriteHandle.", "PendingAddOp.", "BookieClient.add_encoded", "AddStream.enqueue",
                "distribution.py", "rate_limiter.py")),
]
BOOKIE_STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("decode", ("AddEntriesDecoder.", "parse_add_entries", "FromString")),
    ("ack", ("AddBatchProcessor._answer", "SerializeToString", "_SelectorSocketTransport.write",
             "StreamWriter.", "AddPortServer._drain", "frame (")),
    ("transport", ("_read_ready", "data_received", "feed_data", "StreamReader.", "AddPortServer._frame_after",
                   "AddPortServer._requests", "read_frame", "AddPortServer._serve")),
    ("validate", ("AddBatchProcessor._validate", "AddBatchProcessor.check", "Bookie._validate")),
    ("journal", ("journal_format.py", "journal.py", "journal_file.py", "DbLedgerStorage._submit")),
    ("index", ("indexes.py", "kv.py")),
    ("entry log flush", ("entry_logger.py", "ledger_directory.py", "flush_pacer.py", "write_behind.py",
                         "_flush_sync", "last_mark.py")),
    ("write cache", ("write_cache.py", "DbLedgerStorage._stage", "DbLedgerStorage.write", "after_put")),
    ("completion", ("Bookie.add_entries", "AddBatchProcessor.", "AddEntriesHandler.", "limits.py",
                    "stats.py", "prometheus_client")),
]
SAMPLE_RATE = 100  # py-spy samples per second
SAMPLE_INTERVAL_S = 1.0 / SAMPLE_RATE
GENERIC = ("asyncio/", "selectors.py", "threading.py", "concurrent/", "runpy", "pybk/main.py",
           "pybk/__main__.py", "cmd_bookie.py")


@dataclass
class Process:
    name: str
    pid: int
    metrics: str | None = None  # a bookie's metrics URL
    ticks: list[dict[int, int]] = field(default_factory=list)  # per snapshot: thread id -> CPU ticks
    adds: list[float] = field(default_factory=list)  # per snapshot: the bookie's add count
    faults: list[int] = field(default_factory=list)  # per snapshot: the process's minor page faults
    comm: dict[int, str] = field(default_factory=dict)
    profile: Path | None = None

    def thread_cpu_s(self, window: int) -> dict[int, float]:
        """CPU seconds of each thread between snapshots ``window`` and ``window + 1``."""
        before, after = self.ticks[window], self.ticks[window + 1]
        return {tid: (t - before.get(tid, 0)) / CLK_TCK for tid, t in after.items()}

    def window_adds(self, window: int) -> float:
        return self.adds[window + 1] - self.adds[window] if self.metrics else 0.0


def thread_ticks(pid: int) -> tuple[dict[int, int], dict[int, str]]:
    ticks: dict[int, int] = {}
    names: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            names[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks, names


def bookie_adds(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as reply:
        match = ADDS_METRIC.search(reply.read().decode())
    return float(match.group(1)) if match else 0.0


def find_bookies(data_dir: str) -> list[Process]:
    """The ``pybk bookie`` processes whose ledger dirs are under ``data_dir``, with metrics URLs."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode() for a in argv if a]
        if "bookie" not in args or not any(a.startswith(data_dir) for a in args):
            continue
        if "--http-port" in args and "--ledger-dirs" in args:
            port = args[args.index("--http-port") + 1]
            name = Path(args[args.index("--ledger-dirs") + 1]).parent.name
            found.append(Process(name, int(proc.name), f"http://127.0.0.1:{port}/metrics"))
    return sorted(found, key=lambda p: p.name)


def snapshot(processes: list[Process]) -> None:
    for proc in processes:
        ticks, names = thread_ticks(proc.pid)
        proc.comm.update(names)
        proc.ticks.append(ticks)
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        proc.faults.append(int(stat[stat.rindex(")") + 2 :].split()[7]))  # minflt
        if proc.metrics:
            proc.adds.append(bookie_adds(proc.metrics))


def host_speed_s() -> float:
    """Seconds a 10M-step Python loop takes (as scripts/bench_cluster.sh prints): this shared box's
    speed drifts by tens of percent, and every CPU figure moves with it."""
    began = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return round(time.perf_counter() - began, 2)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def classify(frames: list[str], rules: list[tuple[str, tuple[str, ...]]]) -> str:
    for frame in reversed(frames):
        for stage, needles in rules:
            if any(n in frame for n in needles):
                return stage
    if any(g in f for f in frames for g in GENERIC):
        return "event loop"
    return "other"


def stage_shares(
    profile: Path, rules: list[tuple[str, tuple[str, ...]]]
) -> dict[int, tuple[str, Counter[str]]]:
    """Per thread id: its Python name and its samples by stage."""
    threads: dict[int, tuple[str, Counter[str]]] = {}
    head = re.compile(r"^thread \((?:0x)?([0-9a-fA-F]+)\)(?:: (.*))?$")
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        match = head.match(frames[0])
        if match is None or not count.isdigit():
            continue
        tid = int(match.group(1))
        name = match.group(2) or ""
        entry = threads.setdefault(tid, (name, Counter()))
        entry[1][classify(frames[1:], rules)] += int(count)
    return threads


def hottest_lines(profile: Path | None, count: int = 8) -> list[tuple[str, float]]:
    """The innermost frames (function, file and line) with the most GIL samples, with their share
    of all the process's samples in percent: the evidence behind a stage's figure."""
    if profile is None or not profile.exists():
        return []
    leaves: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if samples.isdigit():
            leaves[stack.rsplit(";", 1)[-1]] += int(samples)
    total = sum(leaves.values()) or 1
    return [(frame, round(100 * n / total, 1)) for frame, n in leaves.most_common(count)]


def cost_table(proc: Process, entries: float, rules: list[tuple[str, tuple[str, ...]]]) -> dict[str, float]:
    """µs of CPU per entry by stage (and "total") in the CPU window.

    py-spy samples (``--gil``) only the thread holding the GIL, so a thread's samples times the
    sampling interval are its time running Python (or C holding the GIL), and their stages split
    it. What the thread spent outside the GIL (its CPU in the profile window beyond that: system
    calls such as socket I/O, ``write``, ``fdatasync``) is its own row, as are the threads py-spy
    never saw (gRPC's C core, RocksDB's)."""
    shares = stage_shares(proc.profile, rules) if proc.profile and proc.profile.exists() else {}
    cpu = proc.thread_cpu_s(0)
    profiled_cpu = proc.thread_cpu_s(1)
    per_stage: dict[str, float] = defaultdict(float)
    for tid, cpu_s in cpu.items():
        if cpu_s <= 0:
            continue
        name, samples = shares.get(tid, ("", Counter()))
        gil_s = sum(samples.values()) * SAMPLE_INTERVAL_S
        if not gil_s:
            per_stage[f"threads without Python ({proc.comm.get(tid, '?')})"] += cpu_s
            continue
        # The share of the thread's CPU that held the GIL (at most all of it: a thread holding the
        # GIL while the box runs something else counts wall time, not CPU).
        in_gil = min(1.0, gil_s / profiled_cpu[tid]) if profiled_cpu.get(tid) else 1.0
        total = sum(samples.values())
        for stage, count in samples.items():
            per_stage[stage] += cpu_s * in_gil * count / total
        if in_gil < 1.0:
            per_stage[f"outside the GIL ({_thread_label(name)})"] += cpu_s * (1.0 - in_gil)
    table = {stage: s * 1e6 / entries for stage, s in per_stage.items()}
    table["total"] = sum(table.values())
    return table


def _thread_label(name: str) -> str:
    if name == "MainThread":
        return "event loop thread: sockets, epoll"
    if name.startswith("bookie-journal"):
        return f"{name}: write, fdatasync"
    if name.startswith("asyncio_"):
        return "flush thread: pwrite, sync, RocksDB"
    return name or "?"


def record(pyspy: str, proc: Process, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    proc.profile = out
    return subprocess.Popen(
        [pyspy, "record", "--gil", "--threads", "--format", "raw", "-r", str(SAMPLE_RATE),
         "-d", str(int(seconds)),
         "-p", str(proc.pid), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="the localcluster's data directory")
    parser.add_argument("--zk", required=True, help="its ZooKeeper connect string")
    parser.add_argument("--load", choices=("writes", "bookie"), default="writes")
    parser.add_argument(
        "--rate", type=float, default=0,
        help="writes: entries/s (default 0: max load); a fixed rate compares runs at the same batch sizes",
    )
    parser.add_argument("--ledgers", type=int, default=1, help="writes: ledgers written round-robin")
    parser.add_argument("--batch", action="store_true", help="writes: bench writes --batch")
    parser.add_argument("--settle", type=float, default=6.0, help="seconds before the CPU window")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of each window")
    parser.add_argument("--pyspy", default="py-spy", help="the py-spy command")
    parser.add_argument("--out", default="", help="directory for the profiles (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if shutil.which(args.pyspy) is None:
        print(f"{args.pyspy} not found: pip install py-spy (the dev extra), or name it with --pyspy",
              file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="cost-model."))
    out.mkdir(parents=True, exist_ok=True)
    bookies = find_bookies(args.data_dir)
    if not bookies:
        print(f"no bookie of {args.data_dir} is running", file=sys.stderr)
        return 1
    runtime = args.settle + 2 * args.window + 8  # py-spy writes its profile after its window
    pybk = [sys.executable, "-m", "pybk", "bench"]
    if args.load == "writes":
        command = [*pybk, "writes", "--zk", args.zk, "--time", str(runtime), "--json"]
        command += ["--rate", str(args.rate), "--ledgers", str(args.ledgers)]
        command += ["--batch"] if args.batch else []
    else:  # one bookie, pipelined: enough entries to outlast both windows at 200,000/s
        grpc_port = _grpc_port(bookies[0].pid)
        # --zk: the add port from the bookie's registration, so the bench sends as the client does
        command = [*pybk, "bookie", "--bookie", f"127.0.0.1:{grpc_port}", "--zk", args.zk,
                   "--latency-entries", "0", "--entries", str(int(200_000 * runtime)), "--json"]
        bookies = bookies[:1]
    speed = host_speed_s()
    load = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    client = Process("client", load.pid)
    processes = [client, *bookies]
    loads = [load_average()]
    time.sleep(args.settle)
    snapshot(processes)
    time.sleep(args.window)
    snapshot(processes)
    loads.append(load_average())
    profilers = [record(args.pyspy, p, args.window, out / f"{p.name}.txt") for p in processes]
    for profiler in profilers:
        profiler.wait()
    snapshot(processes)
    loads.append(load_average())
    try:
        output = load.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        load.terminate()
        output = load.communicate()[0]
    result_line = output.decode().strip().splitlines()
    replicated = [b.window_adds(0) for b in bookies]
    quorum = 2 if args.load == "writes" else 1  # bench writes' default Qw
    entries = sum(replicated) / quorum
    report: dict[str, object] = {
        "load": args.load,
        "rate": args.rate,
        "load_average": loads,
        "host_speed_s": speed,
        "window_s": args.window,
        "entries_per_s_in_cpu_window": round(entries / args.window),
        "entries_per_s_while_profiled": round(sum(b.window_adds(1) for b in bookies) / quorum / args.window),
        "client_us_per_entry": _rounded(cost_table(client, entries, CLIENT_STAGES)),
        "bookies_us_per_replica": {
            b.name: _rounded(cost_table(b, adds, BOOKIE_STAGES))
            for b, adds in zip(bookies, replicated, strict=True)
        },
        "page_faults_per_entry": {
            "client": round((client.faults[1] - client.faults[0]) / entries, 3),
            **{
                b.name: round((b.faults[1] - b.faults[0]) / adds, 3)
                for b, adds in zip(bookies, replicated, strict=True)
            },
        },
        "hottest_lines": {p.name: hottest_lines(p.profile) for p in processes},
        "bookie_rss_mib": {b.name: _rss_mib(b.pid) for b in bookies},
        "bench": json.loads(result_line[-1]) if result_line else None,
        "profiles": str(out),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _grpc_port(pid: int) -> str:
    args = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    return args[args.index("--port") + 1]


def _rounded(table: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in sorted(table.items(), key=lambda kv: -kv[1])}


def print_report(report: dict[str, object]) -> None:
    print(f"load average (start, after CPU window, after profile): {report['load_average']}")
    print(f"host speed: a 10M-step Python loop took {report['host_speed_s']} s")
    print(f"entries/s in the CPU window: {report['entries_per_s_in_cpu_window']},"
          f" while profiled: {report['entries_per_s_while_profiled']}")
    print("client µs CPU per entry:")
    for stage, us in report["client_us_per_entry"].items():  # type: ignore[attr-defined]
        print(f"  {stage:40s} {us:7.2f}")
    for name, table in report["bookies_us_per_replica"].items():  # type: ignore[attr-defined]
        print(f"{name} µs CPU per stored entry (replica):")
        for stage, us in table.items():
            print(f"  {stage:40s} {us:7.2f}")
    print(f"minor page faults per entry (client) / stored entry: {report['page_faults_per_entry']}")
    for name, lines in report["hottest_lines"].items():  # type: ignore[attr-defined]
        print(f"{name}: hottest lines (% of its GIL samples)")
        for frame, share in lines:
            print(f"  {share:5.1f}  {frame}")
    print(f"bookie RSS (MiB) at the end: {report['bookie_rss_mib']}")
    print(f"profiles (py-spy raw stacks): {report['profiles']}")


if __name__ == "__main__":
    sys.exit(main())
