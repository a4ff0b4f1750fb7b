"""Fixture plugin: real bookie processes (``python -m pybk bookie``) on loopback ports chosen at run time.

Stable API for every integration test (bookie, client, shell, localcluster):

``BookieProcess(base_dir, zk="none", conf=None, journal_dirs=1, ledger_dirs=2, http=True,
grpc_credentials=None)``
    One bookie with its own journal and ledger directories under ``base_dir`` and a
    ``bk_server.conf`` written from ``conf`` (BookKeeper key names). ``start()`` launches it with
    a free port below the OS's ephemeral range (``ports.restartable_port``) the first time and the
    same port on every later start, then waits until gRPC health is SERVING. ``stop()`` sends SIGTERM and
    returns the exit code; ``kill9()`` sends SIGKILL; ``restart()`` = ``stop()`` (if running) +
    ``start()``. Attributes: ``address`` ("127.0.0.1:PORT"), ``port``, ``http_port`` (None without
    HTTP), ``journal_dirs``, ``ledger_dirs``, ``conf_path``, ``log_path`` (stdout+stderr of every
    run, appended), ``pid``, ``running``; ``log_text()`` reads the whole log, ``run_log_text()`` the
    current run's part.
    The methods block (process start ~1 s): from async tests call them via ``asyncio.to_thread``.

Helpers: ``entry_body(ledger_id, entry_id, lac, payload)`` builds a v3 entry body (32-byte header,
an 8-byte stand-in digest, payload: bookies do not verify digests); ``is_serving(address)``.

Fixtures:
    ``bookie_factory(**kwargs) -> BookieProcess``: starts a bookie (kwargs as above, ``zk`` defaults to
    "none"); every bookie it made is stopped at teardown (SIGKILL if SIGTERM is not enough).
    ``bookie``: one started, unregistered bookie.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from tests.support.ports import restartable_port

READY = re.compile(r"bookie (\S+) ready: grpc (\S+):(\d+), http (\d+|off), add port (\d+|off)")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class BookieStartError(RuntimeError):
    pass


STAND_IN_DIGEST = b"\x5a" * 8


def entry_body(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes = b"") -> bytes:
    """A BookKeeper v3 entry body; ``payload`` defaults to bytes unique to (ledger, entry)."""
    payload = payload or f"payload of ledger {ledger_id} entry {entry_id}".encode()
    return HEADER.pack(ledger_id, entry_id, lac, len(payload)) + STAND_IN_DIGEST + payload


def packed_adds(ledger_id: int, entry_ids: Sequence[int], master_key: bytes) -> bookie_pb2.PackedAdds:
    """A ``PackedAdds`` group of the :func:`entry_body` of each entry id (LAC: the previous id)."""
    bodies = [entry_body(ledger_id, entry_id, entry_id - 1) for entry_id in entry_ids]
    return bookie_pb2.PackedAdds(
        ledger_id=ledger_id, master_key=master_key, entry_ids=entry_ids,
        body_sizes=[len(body) for body in bodies], bodies=b"".join(bodies),
    )  # fmt: skip


def is_serving(address: str, timeout: float = 5.0) -> bool:
    """Whether the bookie at ``address`` answers gRPC health with SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


# The tests' bookies share the host's disk, and how full that disk is belongs to the host, not
# to the test: with BookKeeper's defaults (0.90 / 0.95) a host at 91 % pauses every major
# compaction and at 95 % turns every bookie read-only. The tests about full disks set their own.
HOST_DISK_THRESHOLDS = {"diskUsageWarnThreshold": "0.99", "diskUsageThreshold": "0.99"}


def host_disk_env() -> dict[str, str]:
    """``HOST_DISK_THRESHOLDS`` as the ``BK_<key>`` variables of a process whose bookies this
    module does not configure (``pybk localcluster``, ``pybk verify``): they pass the variables on."""
    return {f"BK_{key}": value for key, value in HOST_DISK_THRESHOLDS.items()}


class BookieProcess:
    def __init__(
        self,
        base_dir: Path,
        *,
        zk: str = "none",
        conf: Mapping[str, str] | None = None,
        journal_dirs: int = 1,
        ledger_dirs: int = 2,
        http: bool = True,
        extra_args: tuple[str, ...] = (),
        grpc_credentials: grpc.ChannelCredentials | None = None,
        conf_file: Path | None = None,
    ) -> None:
        """``conf_file``: run with this file as it is (a stock BookKeeper file), the flags still
        setting the directories, ports and ZooKeeper; otherwise ``conf`` is written to one."""
        self.base_dir = base_dir
        self.grpc_credentials = grpc_credentials  # a TLS bookie's health is asked over TLS
        base_dir.mkdir(parents=True, exist_ok=True)
        self.zk = zk
        self.journal_dirs = [base_dir / f"journal{i}" for i in range(journal_dirs)]
        self.ledger_dirs = [base_dir / f"ledgers{i}" for i in range(ledger_dirs)]
        self.conf_path = conf_file or base_dir / "bk_server.conf"
        self.log_path = base_dir / "bookie.log"
        self.http = http
        self.extra_args = extra_args
        self.port = restartable_port()
        self.http_port: int | None = restartable_port() if http else None
        self.add_port: int | None = None  # from the ready line; a new free port at each start
        self.bookie_id = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._run_log_offset = 0
        self._stock_conf = conf_file is not None
        if conf_file is None:
            self.write_conf(conf or {})

    # -- configuration ------------------------------------------------------------------------

    def write_conf(self, conf: Mapping[str, str]) -> None:
        """(Re)write the conf file; takes effect at the next start. ``conf`` goes over
        ``HOST_DISK_THRESHOLDS``."""
        lines = [f"{key}={value}" for key, value in {**HOST_DISK_THRESHOLDS, **conf}.items()]
        self.conf_path.write_text("\n".join(lines) + "\n")

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "pybk", "bookie",
            "--conf", str(self.conf_path),
            "--zk", self.zk,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--journal-dirs", ",".join(map(str, self.journal_dirs)),
            "--ledger-dirs", ",".join(map(str, self.ledger_dirs)),
        ]  # fmt: skip
        if self.http:
            cmd += ["--http-port", str(self.http_port or 0)]
        return cmd + list(self.extra_args)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("bookie is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> BookieProcess:
        if self.running:
            raise RuntimeError(f"bookie {self.address} is already running")
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._run_log_offset = offset
        with self.log_path.open("ab") as log_file:
            log_file.write(f"---- start: {' '.join(self.command())}\n".encode())
            log_file.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            if self._stock_conf:  # a stock file is run as it is: the thresholds come as BK_ variables
                env = {**host_disk_env(), **env}
            self._proc = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        match = self._wait_ready_line(offset, deadline)
        self.bookie_id = match.group(1)
        self.port = int(match.group(3))
        self.http_port = None if match.group(4) == "off" else int(match.group(4))
        self.add_port = None if match.group(5) == "off" else int(match.group(5))
        self._wait_serving(deadline)
        return self

    def _wait_ready_line(self, offset: int, deadline: float) -> re.Match[str]:
        while True:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            match = READY.search(text)
            if match:
                return match
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BookieStartError(
                    f"bookie exited with code {self._proc.returncode} before it was ready:\n{text[-4000:]}"
                )
            if time.monotonic() > deadline:
                self.kill9()
                raise BookieStartError(f"bookie not ready in time:\n{text[-4000:]}")
            time.sleep(0.05)

    def _wait_serving(self, deadline: float) -> None:
        channel = (
            grpc.secure_channel(self.address, self.grpc_credentials)
            if self.grpc_credentials is not None
            else grpc.insecure_channel(self.address)
        )
        with channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise BookieStartError(f"bookie {self.address} never reported SERVING")
                time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (clean shutdown: drain, flush, checkpoint); returns the exit code."""
        proc = self._proc
        if proc is None:
            raise RuntimeError("bookie was never started")
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"bookie {self.address} ignored SIGTERM for {timeout} s") from None
        return proc.returncode

    def wait_exit(self, timeout: float) -> int:
        """Wait for the bookie to exit on its own; returns the exit code."""
        if self._proc is None:
            raise RuntimeError("bookie was never started")
        return self._proc.wait(timeout)

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self, timeout: float = START_TIMEOUT_S) -> BookieProcess:
        """Stop (cleanly, if running) and start again on the same port with the same directories."""
        if self.running:
            self.stop()
        return self.start(timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def run_log_text(self) -> str:
        """The log of the current (or last) run only."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as f:
            f.seek(self._run_log_offset)
            return f.read().decode(errors="replace")

    def __repr__(self) -> str:
        return f"BookieProcess({self.address}, running={self.running}, dir={self.base_dir})"


BookieFactory = Callable[..., BookieProcess]


@pytest.fixture
def bookie_factory(tmp_path: Path) -> Iterator[BookieFactory]:
    made: list[BookieProcess] = []
    numbers = itertools.count()  # atomic: bookies started from several threads get distinct dirs

    def make(**kwargs: Any) -> BookieProcess:
        process = BookieProcess(tmp_path / f"bookie{next(numbers)}", **kwargs)
        made.append(process)
        return process.start()

    yield make
    for process in made:
        if process.running:
            try:
                process.stop(timeout=30)
            except RuntimeError:
                process.kill9()


@pytest.fixture
def bookie(bookie_factory: BookieFactory) -> BookieProcess:
    return bookie_factory()


def bookieformat_args(bookie: BookieProcess, *flags: str) -> list[str]:
    """``bookieformat`` with the bookie's own configuration, as an operator on its host runs it."""
    return [
        "bookieformat", "--conf", str(bookie.conf_path),
        "--journal-dirs", ",".join(map(str, bookie.journal_dirs)),
        "--ledger-dirs", ",".join(map(str, bookie.ledger_dirs)),
        *flags,
    ]  # fmt: skip
