"""``pybk zookeeper`` runs a real ZooKeeper in the foreground and stops it cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bkmeta.zookeeper_server import four_letter_word, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / p) for p in ("proto", "metadata", "server", "client", "cli")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return env


def _jvm_alive(pid_of_parent: int) -> bool:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid_of_parent)], check=False, capture_output=True, text=True
    )
    return bool(out.stdout.strip())


def test_pybk_zookeeper_serves_and_exits_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pybk", "zookeeper", "--port", str(port), "--data-dir", str(tmp_path / "zk")],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        output = [proc.stdout.readline().decode() for _ in range(1)]
        while "ready on" not in output[-1] and output[-1] and len(output) < 50:
            output.append(proc.stdout.readline().decode())
        assert f"ZooKeeper ready on 127.0.0.1:{port}" in output[-1], output
        assert "Mode: standalone" in four_letter_word("127.0.0.1", port, "srvr")
        client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
        client.start(timeout=15)
        client.create("/persisted", b"yes")
        client.stop()
        client.close()
        assert _jvm_alive(proc.pid)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not _jvm_alive(proc.pid)
        with pytest.raises(OSError):
            four_letter_word("127.0.0.1", port, "ruok", timeout=0.5)
        assert (tmp_path / "zk" / "zoo.cfg").read_text().count(f"clientPort={port}") == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
