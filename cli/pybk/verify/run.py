"""The order of a verify run: cluster up, workers up, nemesis rounds, heal, stop, read back, check.

Against an existing cluster (``--zk``) there is no nemesis and no cluster to start: the workload
runs while the operator does what they do, and the same checker judges the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import random
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pybk.localcluster.child import ChildProcess
from pybk.localcluster.cluster import StartupError
from pybk.localcluster.layout import ClusterLayout
from pybk.verify.checker import CRASH, UNHEALTHY, Violation, check
from pybk.verify.cluster import FaultyCluster
from pybk.verify.history import INVOKE, OK, Event, HistoryTail
from pybk.verify.log_workload import check_logs
from pybk.verify.nemesis import ALL_KINDS, Nemesis
from pybk.verify.readback import read_back
from pybk.verify.report import AddSample, VerifyReport
from pybk.verify.workers import Workers, WorkloadOptions

log = logging.getLogger(__name__)

TRACEBACK = re.compile(rb"^Traceback \(most recent call last\):", re.MULTILINE)
WORKER_STOP_GRACE_S = 40.0


@dataclass
class VerifyOptions:
    seed: int
    data_dir: Path
    duration_s: float | None = 60.0
    rounds: int | None = None
    bookies: int = 3
    zk_port: int = 2281
    base_port: int = 3281
    zk: str | None = None  # an existing cluster: no nemesis
    kinds: tuple[str, ...] = ALL_KINDS
    heal_timeout_s: float = 60.0
    gap_s: tuple[float, float] = (0.5, 2.0)  # quiet time between rounds
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)


class HistoryCollector:
    """Reads every worker incarnation's history as it grows. Keeps what the checker needs; of the
    (many) add invocations it keeps nothing: only acknowledgements and unknown outcomes matter."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.tails: dict[str, HistoryTail] = {}
        self.events: list[Event] = []
        self.adds: list[AddSample] = []

    def poll(self) -> None:
        for incarnation, path in self.workers.histories.items():
            tail = self.tails.setdefault(incarnation, HistoryTail(path, incarnation))
            for ev in tail.read_new():
                if ev["op"] == "add":
                    if ev["f"] == INVOKE:
                        continue
                    if ev["f"] == OK:
                        self.adds.append(AddSample(ev["t"], ev.get("ms", 0.0)))
                self.events.append(ev)


class VerifyRun:
    def __init__(self, options: VerifyOptions, out: TextIO, progress: bool) -> None:
        self.o = options
        self.out = out
        self.progress = progress
        self.rng = random.Random(options.seed)
        self.violations: list[Violation] = []
        self.notes: list[str] = []
        self.cluster: FaultyCluster | None = None
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        if self.progress:
            print(message, file=self.out, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> VerifyReport:
        o = self.o
        if o.zk is None:
            layout = ClusterLayout(data_dir=o.data_dir, bookies=o.bookies, zk_port=o.zk_port,
                                   base_port=o.base_port)
            self.cluster = FaultyCluster(layout, out=self.out if self.progress else io.StringIO())
            mode = f"own cluster: ZooKeeper + {o.bookies} bookies in {o.data_dir}"
        else:
            mode = f"existing cluster at {o.zk}"
        cluster = self.cluster
        try:
            if cluster is not None:
                await cluster.start()
                if cluster.disk_note:
                    self.notes.append(cluster.disk_note)
            workers = Workers(o.data_dir, o.seed, o.workload, self._zk_for)
            collector = HistoryCollector(workers)
            await workers.start_all()
            nemesis = None
            if cluster is not None:
                nemesis = Nemesis(cluster, workers, self.rng, o.kinds, o.heal_timeout_s, self.say)
                self.notes.append(
                    "faults: at most one bookie faulty at a time (kill-all-bookies aside); no fault "
                    "destroys a disk (0 permanent losses, within Qa-1); partitions and slow links by a "
                    "TCP proxy on each link (no network namespaces)")
            await self._rounds(nemesis, workers, collector)
            await workers.stop_all(WORKER_STOP_GRACE_S)
            self._check_workers_exit(workers)
            final_heal = None
            if nemesis is not None and cluster is not None:
                t0 = time.monotonic()
                if await nemesis.wait_healthy():
                    final_heal = time.monotonic() - t0
                else:
                    self.violations.append(Violation(
                        UNHEALTHY,
                        f"the cluster was not healthy {o.heal_timeout_s:.0f} s after the last fault"))
            collector.poll()
            self.say(f"[{self.elapsed():6.0f}s] reading back every ledger through a fresh client ...")
            known = {ev["l"] for ev in collector.events if ev.get("op") == "create" and ev["f"] == OK}
            zk = o.zk if o.zk is not None else cluster.layout.zk_hosts  # type: ignore[union-attr]
            final = await read_back(zk, known)
            _save(final, o.data_dir / "history" / "final.jsonl")
            history = collector.events + final
            result = check(history)
            check_logs(history, result)
            result.violations.extend(self.violations)
            result.violations.extend(self._tracebacks(workers))
            return VerifyReport(
                seed=o.seed, mode=mode, elapsed_s=self.elapsed(), check=result,
                rounds=nemesis.rounds if nemesis else [], timeline=nemesis.timeline if nemesis else [],
                adds=collector.adds, final_heal_s=final_heal, heal_limit_s=o.heal_timeout_s,
                notes=self.notes, history=history,
            )
        finally:
            if cluster is not None:
                with contextlib.suppress(Exception):
                    await cluster.close()

    async def _zk_for(self, name: str) -> str:
        if self.cluster is None:
            assert self.o.zk is not None
            return self.o.zk
        if name not in self.cluster.zk_proxies:
            index = len([n for n in self.cluster.zk_proxies if not n.startswith("bookie-")])
            await self.cluster.add_zk_proxy(name, f"127.0.3.{index + 1}")
        return self.cluster.zk_address_for(name)

    def _done(self, rounds: int) -> bool:
        if self.o.rounds is not None and rounds >= self.o.rounds:
            return True
        return self.o.duration_s is not None and self.elapsed() >= self.o.duration_s

    async def _rounds(self, nemesis: Nemesis | None, workers: Workers, collector: HistoryCollector) -> None:
        index = 0
        while not self._done(index):
            if nemesis is None:
                await asyncio.sleep(5.0)
                line = "workload running against the existing cluster"
            else:
                result = await nemesis.run_round(index)
                faults = "; ".join(f"{f.kind} {f.target} ({f.detail})" for f in result.faults)
                healed = (f"healthy after {result.healthy_after_s:.1f} s"
                          if result.healthy_after_s is not None else "NOT HEALTHY")
                if result.healthy_after_s is None:
                    self.violations.append(Violation(
                        UNHEALTHY, f"round {index}: not healthy {self.o.heal_timeout_s:.0f} s after {faults}",
                        t=time.time()))
                line = f"round {index}: {faults} | {healed}"
                await asyncio.sleep(self.rng.uniform(*self.o.gap_s))
            await self._check_alive(nemesis, workers)
            collector.poll()
            index += 1
            self.say(f"[{self.elapsed():6.0f}s] {line} | acked {len(collector.adds)}"
                     f" | violations so far {len(self.violations)}")

    def _unexpected_exit(self, child: ChildProcess, nemesis: Nemesis | None) -> bool:
        if child.pid is None or child.running() or child.stopping:
            return False
        return nemesis is None or child.pid not in nemesis.killed_pids

    async def _check_alive(self, nemesis: Nemesis | None, workers: Workers) -> None:
        """Every process the nemesis did not kill must still run; a dead worker is restarted so
        the run goes on, a dead server is reported and the run goes on without it."""
        children: list[ChildProcess] = list(workers.processes.values())
        if self.cluster is not None:
            children += [self.cluster.zookeeper, *self.cluster.bookies]
        for child in children:
            if self._unexpected_exit(child, nemesis):
                self.violations.append(
                    Violation(CRASH, child.describe_exit() + _last_words(child), t=time.time()))
                if nemesis is not None:
                    nemesis.killed_pids.add(child.pid or -1)  # report it once
                if child.name in workers.processes:
                    await workers.start(child.name)

    def _check_workers_exit(self, workers: Workers) -> None:
        for name, child in workers.processes.items():
            if child.returncode in (0, None):
                continue
            history = workers.histories[f"{name}.{workers.incarnations[name]}"]
            if child.returncode == -signal.SIGTERM and not _started(history):
                continue  # stopped while still importing, before it could take SIGTERM: no work lost
            self.violations.append(Violation(
                CRASH, f"{child.describe_exit()} when asked to stop{_last_words(child)}", t=time.time()))

    def _tracebacks(self, workers: Workers) -> list[Violation]:
        """A traceback in any process's log is a crash, even if the process carried on."""
        logs = {child.name: child.spec.log_path for child in workers.processes.values()}
        if self.cluster is not None:
            logs.update({c.name: c.spec.log_path for c in [self.cluster.zookeeper, *self.cluster.bookies]})
        found: list[Violation] = []
        for path in sorted(logs.values()):
            try:
                text = Path(path).read_bytes()
            except OSError:
                continue
            hits = TRACEBACK.findall(text)
            if hits:
                at = TRACEBACK.search(text)
                excerpt = text[at.start():at.start() + 1500].decode(errors="replace") if at else ""
                found.append(Violation(CRASH, f"{len(hits)} traceback(s) in {path}; the first:\n{excerpt}"))
        return found


def _started(history: Path) -> bool:
    """Whether a worker got as far as recording its start (its SIGTERM handler is set by then)."""
    return any(ev["op"] == "start" for ev in HistoryTail(history, "").read_new())


def _last_words(child: ChildProcess) -> str:
    tail = child.log_tail(8)
    return "".join(f"\n    | {line}" for line in tail)


def _save(events: list[Event], path: Path) -> None:
    """The final read goes next to the workers' histories, for a post-mortem."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for ev in events:
            f.write(json.dumps(ev, separators=(",", ":")) + "\n")


async def run_verify(options: VerifyOptions, out: TextIO, progress: bool) -> VerifyReport:
    """Run and return the report; raises :class:`StartupError` if the cluster cannot start."""
    return await VerifyRun(options, out, progress).run()


__all__ = ["StartupError", "VerifyOptions", "run_verify"]
