"""A real Prometheus server for tests: found on PATH, or installed from the Debian package
``prometheus`` when the tests run as root on a system with apt-get; otherwise the test is skipped
with a message saying why. It scrapes the targets it is given every second and loads rule files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bkmeta.zookeeper_server import free_port

START_TIMEOUT_S = 60.0  # guards against a hang, not a performance assertion


def prometheus_binary() -> str:
    """The path of ``prometheus``, installing the Debian package if need be and allowed."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("prometheus is not installed and cannot be here (needs root and apt-get):"
                    " apt-get install prometheus")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    found = shutil.which("prometheus")
    if not found:
        pytest.skip(f"apt-get install prometheus failed ({done.returncode}): {done.stderr[-500:]}")
    return found


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", {"query": expr})["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active


@contextmanager
def prometheus_server(
    work_dir: Path, jobs: Mapping[str, Sequence[str]], rule_files: Sequence[Path] = ()
) -> Iterator[Prometheus]:
    """A Prometheus scraping each job's ``host:port`` targets every second; stopped at the end."""
    binary = prometheus_binary()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(targets)}]} for job, targets in jobs.items()
        ],
    }
    config_path = work_dir / "prometheus.yml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = (work_dir / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [binary, f"--config.file={config_path}", f"--storage.tsdb.path={work_dir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    log.close()
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"prometheus did not start:\n{(work_dir / 'prometheus.log').read_text()[-3000:]}"
                    ) from None
                time.sleep(0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
