"""Run ``pybk localcluster`` as a child process for tests: free ports, start until its ready line,
stop with SIGTERM, and find every process it started (used by the localcluster and Prometheus
tests)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.bookies import host_disk_env

BOOKIES = 2
READY_LINE = "pybk local cluster is up"
START_TIMEOUT_S = 240.0  # a guard against hangs, not a performance assertion
STOP_TIMEOUT_S = 90.0
SHELL_TIMEOUT_S = 120.0


def descendants(pid: int) -> set[int]:
    """Every live process whose parent chain leads to ``pid`` (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 is the parent pid; the command name (field 2) may hold spaces, so split after ')'.
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for child, parent in parents.items():
            if parent == current and child not in found:
                found.add(child)
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class LocalClusterRun:
    data_dir: Path
    zk_port: int
    base_port: int
    output_path: Path
    proc: subprocess.Popen[bytes] | None = None
    children: set[int] = field(default_factory=set)
    extra_args: tuple[str, ...] = ()

    @property
    def zk_hosts(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def start(self) -> None:
        self.output_path.write_text("")
        out = self.output_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybk", "localcluster", "--bookies", str(BOOKIES),
             "--zk-port", str(self.zk_port), "--base-port", str(self.base_port),
             "--data-dir", str(self.data_dir), "--grace", "20", "--autorecovery", *self.extra_args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **host_disk_env()},
        )
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in self.output():
            if self.proc.poll() is not None:
                raise AssertionError(f"localcluster exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"localcluster not ready in {START_TIMEOUT_S} s:\n{self.output()}")
            time.sleep(0.2)
        self.children = descendants(self.proc.pid)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def kill_everything(self) -> None:
        for pid in [*self.children, *([self.proc.pid] if self.proc else [])]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def shell(zk_hosts: str, *args: str, as_json: bool = True, stdin: str | None = None) -> Any:
    """Run ``pybk shell``; returns the parsed JSON (as_json) or the CompletedProcess."""
    argv = [sys.executable, "-m", "pybk", "shell", "--zk", zk_hosts, *(["--json"] if as_json else []), *args]
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S,
        input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    if not as_json:
        return done
    assert done.returncode == 0, f"{args} exited {done.returncode}: {done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


@contextlib.contextmanager
def running(run: LocalClusterRun) -> Iterator[LocalClusterRun]:
    """``run`` started, and stopped (every process killed if need be) at the end."""
    run.start()
    try:
        yield run
    finally:
        if run.proc is not None and run.proc.poll() is None:
            try:
                run.stop()
            finally:
                run.kill_everything()


