"""The nemesis: a seeded schedule of faults on the real processes and links, and their healing.

Each round is one *fault schedule*: one or two faults drawn from the seed, applied together, each
held for its own drawn time and then healed; then the round waits until the cluster is healthy
again (every bookie registered writable) and records how long that took.

The rule on losses: no fault here destroys data. ``kill -9`` and SIGSTOP leave a bookie's disk as
it was (what it acknowledged was fsynced), a full disk is emptied again, so the number of
*permanent* losses is always 0, within the Qa - 1 that any ledger (Qa >= 1) survives. For
liveness, at most one bookie is faulty at a time (killed, paused, cut off, slowed, expired or
full), so a 3-bookie cluster keeps Qw=2 ensembles writable through every fault; the one
exception is ``kill-all-bookies``, every bookie killed at once (no disk lost, so still nothing
acknowledged may go; only writes wait until they are back).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pybk.localcluster.child import ChildProcess
from pybk.verify.cluster import SESSION_TIMEOUT_MS, FaultyCluster
from pybk.verify.workers import Workers

BOOKIE_KINDS = (
    "kill-bookie", "pause-bookie", "partition-bookie", "slow-bookie", "expire-bookie-session", "disk-full",
)
OTHER_KINDS = ("kill-writer", "pause-writer", "expire-writer-session", "kill-zookeeper")
# Every bookie at once: the one exception to "one faulty bookie at a time". It destroys no disk,
# so nothing acknowledged may be lost, but nothing is writable until they are back.
CLUSTER_KINDS = ("kill-all-bookies",)
ALL_KINDS = BOOKIE_KINDS + OTHER_KINDS + CLUSTER_KINDS
SESSION_EXPIRY_HOLD_S = SESSION_TIMEOUT_MS / 1000.0 * 1.5 + 1.0


@dataclass
class Fault:
    kind: str
    target: str
    start: float  # wall-clock seconds, like the histories
    end: float | None = None
    detail: str = ""
    settled: float | None = None  # when the cluster was healthy again after the fault's round

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "target": self.target, "start": self.start, "end": self.end,
                "settled": self.settled, "detail": self.detail}


@dataclass
class RoundResult:
    index: int
    faults: list[Fault]
    healthy_after_s: float | None  # None: not healthy within the limit


@dataclass
class Nemesis:
    cluster: FaultyCluster
    workers: Workers
    rng: random.Random
    kinds: tuple[str, ...]
    heal_timeout_s: float = 60.0
    say: Callable[[str], None] = print
    timeline: list[Fault] = field(default_factory=list)
    rounds: list[RoundResult] = field(default_factory=list)
    killed_pids: set[int] = field(default_factory=set)

    def draw(self) -> list[tuple[str, str]]:
        """One schedule: (kind, target) pairs, at most one of them on a bookie."""
        count = 1 if self.rng.random() < 0.6 else 2
        chosen: list[tuple[str, str]] = []
        bookie_used = False
        for _ in range(count):
            kinds = [k for k in self.kinds if not (bookie_used and k in BOOKIE_KINDS + CLUSTER_KINDS)
                     and k not in (c for c, _ in chosen)]
            if not kinds:
                break
            kind = self.rng.choice(kinds)
            if kind in CLUSTER_KINDS:
                bookie_used = True
                target = "bookies"
            elif kind in BOOKIE_KINDS:
                bookie_used = True
                index = 0 if kind == "disk-full" else self.rng.randrange(self.cluster.layout.bookies)
                target = f"bookie-{index}"
            elif kind == "kill-zookeeper":
                target = "zookeeper"
            else:
                target = self.rng.choice(self.workers.writer_names())
            chosen.append((kind, target))
        return chosen

    async def run_round(self, index: int) -> RoundResult:
        schedule = self.draw()
        faults = await asyncio.gather(*(self._one(kind, target) for kind, target in schedule))
        started = time.monotonic()
        healthy = await self.wait_healthy()
        for fault in faults:
            fault.settled = time.time()
        result = RoundResult(index, list(faults), time.monotonic() - started if healthy else None)
        self.rounds.append(result)
        return result

    async def wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.heal_timeout_s
        while time.monotonic() < deadline:
            if await self.cluster.healthy():
                return True
            await asyncio.sleep(0.2)
        return False

    def _hold(self, low: float, high: float) -> float:
        return round(self.rng.uniform(low, high), 2)

    async def _one(self, kind: str, target: str) -> Fault:
        fault = Fault(kind, target, time.time())
        self.timeline.append(fault)
        apply: dict[str, Callable[[Fault], Awaitable[None]]] = {
            "kill-bookie": self._kill_bookie,
            "pause-bookie": self._pause,
            "pause-writer": self._pause,
            "partition-bookie": self._partition_bookie,
            "slow-bookie": self._slow_bookie,
            "expire-bookie-session": self._expire_session,
            "expire-writer-session": self._expire_session,
            "disk-full": self._disk_full,
            "kill-writer": self._kill_writer,
            "kill-zookeeper": self._kill_zookeeper,
            "kill-all-bookies": self._kill_all_bookies,
        }
        await apply[kind](fault)
        fault.end = time.time()
        return fault

    def _process(self, name: str) -> ChildProcess:
        if name.startswith("bookie-"):
            return self.cluster.bookies[int(name.split("-")[1])]
        return self.workers.processes[name]

    async def _kill_bookie(self, fault: Fault) -> None:
        index = int(fault.target.split("-")[1])
        hold = self._hold(0.5, 6.0)
        child = self.cluster.bookies[index]
        if child.pid is not None:
            self.killed_pids.add(child.pid)
        await self.cluster.kill9(child)
        await asyncio.sleep(hold)
        await self.cluster.restart_bookie(index)
        fault.detail = f"down {hold} s"

    async def _kill_all_bookies(self, fault: Fault) -> None:
        hold = self._hold(0.5, 3.0)
        for child in self.cluster.bookies:
            if child.pid is not None:
                self.killed_pids.add(child.pid)
        await asyncio.gather(*(self.cluster.kill9(child) for child in self.cluster.bookies))
        await asyncio.sleep(hold)
        for index in range(len(self.cluster.bookies)):
            await self.cluster.restart_bookie(index)
        fault.detail = f"all down {hold} s"

    async def _pause(self, fault: Fault) -> None:
        hold = self._hold(0.5, 6.0)
        child = self._process(fault.target)
        self.cluster.signal(child, signal.SIGSTOP)
        await asyncio.sleep(hold)
        self.cluster.signal(child, signal.SIGCONT)
        fault.detail = f"stopped {hold} s"

    async def _partition_bookie(self, fault: Fault) -> None:
        index = int(fault.target.split("-")[1])
        hold = self._hold(1.0, 8.0)
        for proxy in self.cluster.client_proxies[index]:
            proxy.set_partition()
        await asyncio.sleep(hold)
        for proxy in self.cluster.client_proxies[index]:
            proxy.set_pass()
        fault.detail = f"cut off from every client {hold} s"

    async def _slow_bookie(self, fault: Fault) -> None:
        index = int(fault.target.split("-")[1])
        hold = self._hold(1.0, 8.0)
        delay = self._hold(0.02, 0.5)
        for proxy in self.cluster.client_proxies[index]:
            proxy.set_slow(delay)
        await asyncio.sleep(hold)
        for proxy in self.cluster.client_proxies[index]:
            proxy.set_pass()
        fault.detail = f"+{int(delay * 1000)} ms per chunk for {hold} s"

    async def _expire_session(self, fault: Fault) -> None:
        proxy = self.cluster.zk_proxies[fault.target]
        proxy.set_partition()
        await asyncio.sleep(SESSION_EXPIRY_HOLD_S)
        proxy.set_pass()
        fault.detail = f"cut from ZooKeeper {SESSION_EXPIRY_HOLD_S} s (session {SESSION_TIMEOUT_MS} ms)"

    async def _disk_full(self, fault: Fault) -> None:
        if not self.cluster.disk_mounted:
            fault.detail = "skipped: no small filesystem"
            return
        hold = self._hold(2.0, 8.0)
        index = int(fault.target.split("-")[1])
        log_from = self.cluster.log_size(index)
        written = await asyncio.to_thread(self.cluster.fill_disk)
        await asyncio.sleep(hold)
        await asyncio.to_thread(self.cluster.empty_disk)
        fault.detail = f"filled ({written >> 20} MiB of filler) for {hold} s"
        if self.cluster.index_failed_since(index, log_from):
            # RocksDB refuses writes after a failed one until it is reopened: the README's
            # remedy is a restart once the disk has room, which is what an operator would do.
            await self.cluster.bookies[index].stop(self.cluster.grace_s)
            await self.cluster.restart_bookie(index)
            fault.detail += "; an index write failed, so the bookie was restarted as documented"

    async def _kill_writer(self, fault: Fault) -> None:
        hold = self._hold(0.2, 3.0)
        child = self.workers.processes[fault.target]
        if child.pid is not None:
            self.killed_pids.add(child.pid)
        await self.cluster.kill9(child)
        await asyncio.sleep(hold)
        await self.workers.start(fault.target)
        fault.detail = f"restarted after {hold} s"

    async def _kill_zookeeper(self, fault: Fault) -> None:
        hold = self._hold(0.5, 5.0)
        child = self.cluster.zookeeper
        if child.pid is not None:
            self.killed_pids.add(child.pid)
        await self.cluster.kill9(child)
        await asyncio.sleep(hold)
        await self.cluster.restart_zookeeper()
        fault.detail = f"down {hold} s"
