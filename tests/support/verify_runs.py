"""Run ``pybk verify`` as a user would (its own process) and read its JSON summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.bookies import host_disk_env
from tests.support.ports import pick_ports

# A guard against a hung run, not a performance assertion.
RUN_TIMEOUT_S = 400.0


@dataclass
class VerifyOutcome:
    returncode: int
    summary: dict[str, Any]
    stderr: str


def run_verify(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, bookies: int = 3
) -> VerifyOutcome:
    zk_port, base_port = pick_ports(bookies)
    argv = [
        sys.executable, "-m", "pybk", "verify", "--json", "--bookies", str(bookies),
        "--zk-port", str(zk_port), "--base-port", str(base_port), "--data-dir", str(data_dir), *args,
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        env={**os.environ, **host_disk_env(), **(env or {})},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    summary: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return VerifyOutcome(done.returncode, summary, done.stderr)
