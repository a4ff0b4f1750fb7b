"""The workload processes of a verify run: start, kill, restart, and where their histories are.

Each start of a worker is an *incarnation* with its own history file
(``history/<name>.<n>.jsonl``) and its own seed derived from the run's seed, so a restarted writer
never reuses its predecessor's random stream and the checker knows which process said what.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from pybk.localcluster.child import ChildProcess, ChildSpec


@dataclass(frozen=True)
class WorkloadOptions:
    writers: int = 2
    quorums: str = "3/2/2,3/3/2,3/3/3,2/2/2"
    rate: float = 100.0
    window: int = 32
    recoverers: int = 1
    tailers: int = 1
    loggers: int = 1
    max_entries: int = 600
    recover_every_s: float = 4.0


class Workers:
    """Every workload process of the run, by name (``writer-0``, ``recoverer-0``, ``tailer-0``)."""

    def __init__(
        self,
        data_dir: Path,
        seed: int,
        options: WorkloadOptions,
        zk_for: Callable[[str], Awaitable[str]],
        python: str = sys.executable,
    ) -> None:
        self.data_dir = data_dir
        self.seed = seed
        self.options = options
        self.zk_for = zk_for  # the connect string a worker must use (its own proxy, if any)
        self.python = python
        self.processes: dict[str, ChildProcess] = {}
        self.incarnations: dict[str, int] = {}
        self.histories: dict[str, Path] = {}  # "<name>.<n>" -> history file

    @property
    def names(self) -> list[str]:
        o = self.options
        return ([f"writer-{i}" for i in range(o.writers)]
                + [f"recoverer-{i}" for i in range(o.recoverers)]
                + [f"tailer-{i}" for i in range(o.tailers)]
                + [f"logger-{i}" for i in range(o.loggers)])

    def writer_names(self) -> list[str]:
        """The processes the nemesis kills, pauses and cuts from ZooKeeper as "writers"."""
        return [n for n in self.names if n.startswith(("writer-", "logger-"))]

    async def start_all(self) -> None:
        for name in self.names:
            await self.start(name)

    async def start(self, name: str) -> ChildProcess:
        n = self.incarnations.get(name, 0) + 1
        self.incarnations[name] = n
        incarnation = f"{name}.{n}"
        history = self.data_dir / "history" / f"{incarnation}.jsonl"
        self.histories[incarnation] = history
        role = name.split("-", maxsplit=1)[0]
        o = self.options
        # Distinct, reproducible streams per process and incarnation.
        seed = (self.seed * 1_000_003 + sum(map(ord, name)) * 7919 + n) % (2**63)
        argv = (
            self.python, "-m", "pybk.verify.worker", role,
            "--zk", await self.zk_for(name),
            "--name", incarnation,
            "--seed", str(seed),
            "--history", str(history),
            "--quorums", o.quorums,
            "--rate", str(o.rate),
            "--window", str(o.window),
            "--max-entries", str(o.max_entries),
            "--recover-every", str(o.recover_every_s),
        )
        child = ChildProcess(ChildSpec(name, argv, self.data_dir / "logs" / f"{name}.log"))
        self.processes[name] = child
        await child.start()
        return child

    async def stop_all(self, grace_s: float) -> None:
        await asyncio.gather(*(child.stop(grace_s) for child in self.processes.values()))
