"""Where a local cluster keeps its files and which ports it uses, and the commands it runs.

    D/zookeeper/                ZooKeeper's data (zoo.cfg, snapshots, transaction logs)
    D/bookie-<i>/journal        bookie i's journal
    D/bookie-<i>/ledgers        bookie i's entry logs and indexes
    D/logs/zookeeper.log        each child's stdout and stderr
    D/logs/bookie-<i>.log
    D/logs/autorecovery.log     with --autorecovery
    D/localcluster.lock         held while a localcluster runs on D (one at a time)

Bookie i (0-based) listens on ``base_port + i`` for gRPC, ``base_port + 100 + i`` for HTTP
(``/heartbeat``, ``/metrics``) and ``base_port + 200 + i`` for its add port. With
``autorecovery``, a ``pybk autorecovery`` process serves its metrics on ``base_port + 99``, the port
just below the HTTP range. The same layout on the same directory gives the same cluster back.
"""

from __future__ import annotations

import errno
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from pybk.localcluster.child import ChildSpec

HTTP_PORT_OFFSET = 100
ADD_PORT_OFFSET = 200
MAX_BOOKIES = HTTP_PORT_OFFSET  # the gRPC, HTTP and add port ranges must not overlap


class LayoutError(ValueError):
    """The requested cluster cannot be laid out (bad count or ports)."""


@dataclass(frozen=True)
class ClusterLayout:
    data_dir: Path
    bookies: int = 3
    zk_port: int = 2181
    base_port: int = 3181
    host: str = "127.0.0.1"
    python: str = sys.executable
    autorecovery: bool = False
    # BookKeeper keys each bookie gets as BK_<key> (TLS with --tls) and the client configuration
    # file every client process gets as PYBK_CLIENT_CONF
    bookie_env: tuple[tuple[str, str], ...] = ()
    client_conf: Path | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.bookies <= MAX_BOOKIES:
            raise LayoutError(f"--bookies must be between 1 and {MAX_BOOKIES}, got {self.bookies}")
        if not 1 <= self.zk_port <= 65535:
            raise LayoutError(f"--zk-port must be a TCP port (1-65535), got {self.zk_port}")
        top = self.base_port + ADD_PORT_OFFSET + self.bookies - 1
        if self.base_port < 1 or top > 65535:
            raise LayoutError(
                f"--base-port {self.base_port} leaves no room for {self.bookies} bookies "
                f"(ports {self.base_port}..{top} are needed)"
            )
        if self.zk_port in self.all_bookie_ports():
            raise LayoutError(f"--zk-port {self.zk_port} collides with a bookie port")
        if self.autorecovery and self.bookies == MAX_BOOKIES:
            raise LayoutError(f"--autorecovery needs port {self.autorecovery_http_port}, the last bookie's"
                              f" gRPC port: run at most {MAX_BOOKIES - 1} bookies with it")
        if self.autorecovery and self.zk_port == self.autorecovery_http_port:
            raise LayoutError(f"--zk-port {self.zk_port} collides with the autorecovery port")

    # -- addresses -----------------------------------------------------------------------------

    @property
    def zk_hosts(self) -> str:
        return f"{self.host}:{self.zk_port}"

    def bookie_port(self, index: int) -> int:
        return self.base_port + index

    def http_port(self, index: int) -> int:
        return self.base_port + HTTP_PORT_OFFSET + index

    def add_port(self, index: int) -> int:
        # Fixed rather than left to the bookie to pick, so that the same layout gives the same
        # cluster back and a port taken by something else is reported before anything starts.
        return self.base_port + ADD_PORT_OFFSET + index

    def bookie_address(self, index: int) -> str:
        return f"{self.host}:{self.bookie_port(index)}"

    @property
    def tls(self) -> bool:
        return self.client_conf is not None

    def metrics_url(self, index: int) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.http_port(index)}/metrics"

    def heartbeat_url(self, index: int) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.http_port(index)}/heartbeat"

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "tls"

    @property
    def autorecovery_http_port(self) -> int:
        return self.base_port + HTTP_PORT_OFFSET - 1

    @property
    def autorecovery_metrics_url(self) -> str:
        return f"http://{self.host}:{self.autorecovery_http_port}/metrics"

    def all_bookie_ports(self) -> set[int]:
        return {
            port(i) for i in range(self.bookies) for port in (self.bookie_port, self.http_port, self.add_port)
        }

    def busy_ports(self) -> list[int]:
        """Ports of this layout that something else already listens on (checked by binding)."""
        busy: list[int] = []
        ports = {self.zk_port} | self.all_bookie_ports()
        if self.autorecovery:
            ports.add(self.autorecovery_http_port)
        for port in sorted(ports):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                # Like the servers themselves: TIME_WAIT leftovers of a previous run are no conflict.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.host, port))
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        busy.append(port)
                    else:
                        raise
        return busy

    # -- files ---------------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def zookeeper_dir(self) -> Path:
        return self.data_dir / "zookeeper"

    def bookie_dir(self, index: int) -> Path:
        return self.data_dir / f"bookie-{index}"

    def journal_dir(self, index: int) -> Path:
        return self.bookie_dir(index) / "journal"

    def ledger_dir(self, index: int) -> Path:
        return self.bookie_dir(index) / "ledgers"

    def _client_env(self) -> dict[str, str]:
        return {"PYBK_CLIENT_CONF": str(self.client_conf)} if self.client_conf is not None else {}

    # -- commands ------------------------------------------------------------------------------

    def zookeeper_spec(self) -> ChildSpec:
        return ChildSpec(
            name="zookeeper",
            argv=(
                self.python, "-m", "pybk", "zookeeper",
                "--port", str(self.zk_port),
                "--data-dir", str(self.zookeeper_dir),
            ),
            log_path=self.log_dir / "zookeeper.log",
        )

    def bookie_spec(self, index: int) -> ChildSpec:
        return ChildSpec(
            name=f"bookie-{index}",
            argv=(
                self.python, "-m", "pybk", "bookie",
                "--zk", self.zk_hosts,
                "--port", str(self.bookie_port(index)),
                "--http-port", str(self.http_port(index)),
                "--add-port", str(self.add_port(index)),
                "--journal-dirs", str(self.journal_dir(index)),
                "--ledger-dirs", str(self.ledger_dir(index)),
                # A development cluster listens on loopback only.
                "--bind", self.host,
                "--advertised-address", self.host,
            ),
            log_path=self.log_dir / f"bookie-{index}.log",
            env={f"BK_{key}": value for key, value in self.bookie_env},
        )

    def autorecovery_spec(self) -> ChildSpec:
        return ChildSpec(
            name="autorecovery",
            argv=(
                self.python, "-m", "pybk", "autorecovery",
                "--zk", self.zk_hosts,
                "--http-port", str(self.autorecovery_http_port),
            ),
            log_path=self.log_dir / "autorecovery.log",
            # a development cluster: its metrics on loopback only, like the bookies'
            env={"BK_bindAddress": self.host, **self._client_env()},
        )
