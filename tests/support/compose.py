"""Drive ``deploy/docker-compose.yml`` for the compose test: build, up, wait for health, down.

The project is given its own name so a test run never touches a cluster a user started from the
same file. Base images come from the environment (``PYTHON_IMAGE``, ``ZOOKEEPER_IMAGE``,
``PROMETHEUS_IMAGE``), as ``deploy/local-images.env`` sets them where Docker Hub is out of reach.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
TLS_OVERLAY = REPO / "deploy" / "docker-compose.tls.yml"


# Every host port the cluster binds (host networking): ZooKeeper, Prometheus, autorecovery's HTTP,
# and each bookie's gRPC, HTTP and add port.
HOST_PORTS = [2181, 9090, 3280, *(p for i in range(1, 5) for p in (3180 + i, 3280 + i, 3380 + i))]


def busy_host_ports() -> list[int]:
    """The cluster's host ports something already listens on (the test cannot run then)."""
    busy = []
    for port in HOST_PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


def build_wheels() -> None:
    """``deploy/build-wheels.sh``: the image installs from host-built wheels (no index needed)."""
    subprocess.run([str(REPO / "deploy" / "build-wheels.sh")], check=True, timeout=900,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})


class ComposeError(RuntimeError):
    """A docker or docker-compose command failed; the message has its output."""


def _run(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
                          env=dict(env) if env is not None else None)
    if done.returncode != 0:
        raise ComposeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class ComposeProject:
    def __init__(
        self, name: str, environ: Mapping[str, str] | None = None, *, overlays: Sequence[Path] = (),
        profiles: Sequence[str] = (),
    ) -> None:
        """``overlays``: compose files layered over docker-compose.yml; ``profiles``: enabled."""
        self.name = name
        self.env = {**os.environ, **(environ or {})}
        self._files = [arg for f in (COMPOSE_FILE, *overlays) for arg in ("-f", str(f))]
        self._profiles = [arg for profile in profiles for arg in ("--profile", profile)]

    def compose(self, *args: str, timeout_s: float = 600) -> str:
        return _run(["docker-compose", "-p", self.name, *self._files, *self._profiles, *args],
                    timeout_s=timeout_s, env=self.env)

    def copy_out(self, service: str, path: str, dest: Path) -> None:
        """``docker cp`` a directory's contents out of a service's container (running or not)."""
        _run(["docker", "cp", f"{self.container(service)}:{path}/.", str(dest)], timeout_s=60)

    def container(self, service: str) -> str:
        """The id of a service's container (``ps -q`` lists stopped ones too)."""
        ids = self.compose("ps", "-q", service, timeout_s=60).split()
        if not ids:
            raise ComposeError(f"service {service} has no container")
        return ids[0]

    def state(self, service: str) -> dict[str, object]:
        out = _run(["docker", "inspect", "-f", "{{json .State}}", self.container(service)], timeout_s=60)
        state = json.loads(out)
        assert isinstance(state, dict)
        return state

    def health(self, service: str) -> str:
        state = self.state(service)
        health = state.get("Health")
        if isinstance(health, dict):
            return str(health.get("Status"))
        return "exited" if state.get("Status") == "exited" else "no-healthcheck"

    def wait_healthy(self, services: Sequence[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(services)
        while pending:
            pending = [s for s in pending if self.health(s) != "healthy"]
            if not pending:
                return
            if time.monotonic() > deadline:
                logs = self.compose("logs", "--tail", "40", *pending, timeout_s=60)
                raise ComposeError(f"not healthy after {timeout_s:.0f} s: {pending}\n{logs}")
            time.sleep(2)

    def kill(self, service: str) -> None:
        """``docker kill`` (SIGKILL): the container stays down, as a lost machine would."""
        _run(["docker", "kill", "--signal", "KILL", self.container(service)], timeout_s=60)

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks this project still has."""
        label = f"label=com.docker.compose.project={self.name}"
        found: list[str] = []
        for kind in ("container ls -a", "volume ls", "network ls"):
            out = _run(["docker", *kind.split(), "-q", "--filter", label], timeout_s=60)
            found += [f"{kind.split()[0]} {item}" for item in out.split()]
        return found


SERVICES = ["zookeeper", "bookie-1", "bookie-2", "bookie-3", "bookie-4", "autorecovery", "prometheus"]


@contextmanager
def running_cluster(project: ComposeProject) -> Iterator[ComposeProject]:
    """Build, ``up -d`` and wait until every service is healthy; ``down -v`` at the end and
    check nothing of the project is left."""
    busy = busy_host_ports()
    assert not busy, f"ports the compose cluster uses are taken on this host: {busy}"
    build_wheels()
    project.compose("build", timeout_s=1200)
    try:
        project.compose("up", "-d", timeout_s=600)
        project.wait_healthy(SERVICES, timeout_s=300)
        yield project
    finally:
        project.compose("down", "-v", "--remove-orphans", timeout_s=300)
    assert project.leftovers() == []
