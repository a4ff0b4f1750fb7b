"""One child process of the local cluster (ZooKeeper or a bookie), with its output in a log file.

Children run in their own session so a Ctrl-C in the terminal reaches only ``pybk localcluster``,
which then stops them in order (bookies first, ZooKeeper last). On Linux each child also gets
``PR_SET_PDEATHSIG``: if ``localcluster`` itself is killed with SIGKILL, the children get SIGTERM
instead of running on as orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the forked child before exec: ask the kernel for SIGTERM when the parent dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        # Not Linux, or no prctl: the orderly shutdown path still stops the children.
        pass


@dataclass(frozen=True)
class ChildSpec:
    """What to run: a name for messages, the argv, and the log file that receives its output."""

    name: str
    argv: tuple[str, ...]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)


class ChildProcess:
    """A started child. ``start()`` launches it; ``stop()`` sends SIGTERM, waits, then SIGKILLs."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self._proc: asyncio.subprocess.Process | None = None
        self._stopping = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called: an exit after that is expected, not a crash."""
        return self._stopping

    async def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.spec.env)
        # Append: a restarted cluster keeps the earlier runs' logs for post-mortems.
        with self.spec.log_path.open("ab") as log_file:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log_file.write(f"\n=== {stamp} starting: {' '.join(self.spec.argv)}\n".encode())
            log_file.flush()
            # The child holds its own copy of the descriptor; ours can close right away.
            self._proc = await asyncio.create_subprocess_exec(
                *self.spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        log.debug("started %s pid %s", self.name, self._proc.pid)

    async def wait(self) -> int:
        """Wait for the child to exit and return its exit code (negative: killed by that signal)."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return await self._proc.wait()

    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def stop(self, grace_s: float) -> int | None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL. Returns the exit code (None if never started)."""
        self._stopping = True
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=grace_s)
            except TimeoutError:
                log.warning("%s (pid %s) did not stop within %.0f s of SIGTERM; killing it",
                            self.name, proc.pid, grace_s)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return proc.returncode

    def log_tail(self, lines: int = 5, max_bytes: int = 8192) -> list[str]:
        """The last lines of the child's log (its last words are usually why it died)."""
        try:
            with self.spec.log_path.open("rb") as log_file:
                size = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(0, size - max_bytes))
                text = log_file.read().decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def describe_exit(self) -> str:
        """A one-line account of how the child ended, for the user."""
        code = self.returncode
        if code is None:
            how = "is still running"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return f"{self.name} (pid {self.pid}) {how}; its log is {self.spec.log_path}"
