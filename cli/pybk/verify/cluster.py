"""The cluster ``pybk verify`` breaks: a :class:`~pybk.localcluster.cluster.LocalCluster` (real
ZooKeeper, N bookie processes, same layout, start-up steps and self-check) with a fault proxy on
every link, a small filesystem under one bookie's ledger directory, and the verify workers.

Addresses (all loopback; Linux routes the whole 127/8 to ``lo``):

* bookie i binds 127.0.0.1 and advertises ``127.0.1.<i+1>`` on the same ports; proxies on that
  alias forward its gRPC and add ports, so every client connection to it can be cut or slowed;
* bookie i reaches ZooKeeper through ``127.0.2.<i+1>:ZK_PORT``, worker j through
  ``127.0.3.<j+1>:ZK_PORT``: cutting that link for longer than the session timeout expires the
  process's ZooKeeper session for real.

The disk fault needs a size-limited filesystem: a tmpfs mounted on bookie 0's ledger directory
(root only). Without it the fault is left out and the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from bkmeta import MetadataClient
from bkproto.errors import BKError
from bookie.state_manager import ReadOnlyReason
from pybk.localcluster import steps
from pybk.localcluster.child import ChildProcess, ChildSpec
from pybk.localcluster.cluster import LocalCluster
from pybk.localcluster.layout import ClusterLayout
from pybk.verify.proxy import FaultProxy

log = logging.getLogger(__name__)

# Bookies' and workers' ZooKeeper session timeout: an expiry fault lasts a bit longer than this.
SESSION_TIMEOUT_MS = 4000
DISK_BOOKIE = 0
DISK_SIZE = "96m"
FILLER_NAME = "pybk-verify-filler"
READY_MARK = b" ready: grpc "  # the bookie daemon's ready line, logged once it registered
# What a bookie logs when a failed index write made it read-only until a restart.
INDEX_FAILED_MARK = f"read-only because {ReadOnlyReason.INDEX_FAILED.value}".encode()
BOOKIE_ENV = {
    "BK_zkTimeout": str(SESSION_TIMEOUT_MS),
    "BK_diskCheckInterval": "1000",  # notice a full disk (and its end) within a second
    "BK_logSizeLimit": str(8 * 1024 * 1024),  # entry logs that fit a small filesystem
}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def bookie_alias(index: int) -> str:
    return f"127.0.1.{index + 1}"


def _replace_option(argv: tuple[str, ...], option: str, value: str) -> tuple[str, ...]:
    at = argv.index(option)
    return (*argv[: at + 1], value, *argv[at + 2:])


class FaultyCluster(LocalCluster):
    """A local cluster whose links, processes and one disk the nemesis can break and heal."""

    def __init__(self, layout: ClusterLayout, *, out: TextIO) -> None:
        super().__init__(layout, out=out, grace_s=15.0)
        self.bookie_specs = [self._bookie_spec(i) for i in range(layout.bookies)]
        self.bookies = [ChildProcess(spec) for spec in self.bookie_specs]
        self.client_proxies: list[list[FaultProxy]] = []  # per bookie: gRPC and add port
        self.zk_proxies: dict[str, FaultProxy] = {}  # process name -> its link to ZooKeeper
        self.disk_mounted = False
        self.disk_note = ""
        self.meta: MetadataClient | None = None
        self._log_offsets: dict[str, int] = {}  # where each bookie's log of its current run starts

    def _bookie_spec(self, index: int) -> ChildSpec:
        spec = self.layout.bookie_spec(index)
        argv = _replace_option(spec.argv, "--zk", f"127.0.2.{index + 1}:{self.layout.zk_port}")
        argv = _replace_option(argv, "--advertised-address", bookie_alias(index))
        return dataclasses.replace(spec, argv=argv, env={**spec.env, **BOOKIE_ENV})

    def zk_address_for(self, process: str) -> str:
        """The ZooKeeper connect string ``process`` must use (its own proxy)."""
        return "{}:{}".format(*self.zk_proxies[process].listen)

    async def add_zk_proxy(self, process: str, host: str) -> None:
        proxy = FaultProxy(f"{process}->zookeeper", (host, self.layout.zk_port),
                           (self.layout.host, self.layout.zk_port))
        await proxy.start()
        self.zk_proxies[process] = proxy

    async def start(self) -> None:
        layout = self.layout
        self._mount_disk()
        for i in range(layout.bookies):
            pair = [
                FaultProxy(f"clients->bookie-{i}", (bookie_alias(i), port), (layout.host, port))
                for port in (layout.bookie_port(i), layout.add_port(i))
            ]
            for proxy in pair:
                await proxy.start()
            self.client_proxies.append(pair)
            await self.add_zk_proxy(f"bookie-{i}", f"127.0.2.{i + 1}")
        await super().start()
        self.meta = await MetadataClient.connect(layout.zk_hosts, session_timeout_s=30.0)

    async def close(self) -> None:
        if self.meta is not None:
            with contextlib.suppress(Exception):
                await self.meta.close()
        await super().close()
        for proxy in [*self.zk_proxies.values(), *(p for pair in self.client_proxies for p in pair)]:
            await proxy.close()
        self._unmount_disk()

    # -- processes -----------------------------------------------------------------------------

    @staticmethod
    def signal(child: ChildProcess, signum: signal.Signals) -> None:
        """Signal the child's whole process group (it leads its own session): ``pybk zookeeper``
        runs the JVM as its own child, which must die or pause with it."""
        if child.pid is not None and child.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

    async def kill9(self, child: ChildProcess) -> None:
        self.signal(child, signal.SIGCONT)  # a paused child must die too, not linger stopped
        self.signal(child, signal.SIGKILL)
        if child.pid is not None:
            await child.wait()

    async def restart_bookie(self, index: int) -> None:
        spec = self.bookie_specs[index]
        self._log_offsets[spec.name] = _size(spec.log_path)
        self.bookies[index] = ChildProcess(spec)
        await self.bookies[index].start()

    async def restart_zookeeper(self) -> None:
        self.zookeeper = ChildProcess(self.layout.zookeeper_spec())
        await self.zookeeper.start()

    async def healthy(self) -> bool:
        """ZooKeeper serves, and every bookie process runs, has said it is ready since its last
        start (after it registered) and is registered writable now, as ZooKeeper answers today
        (not a cached view: it may be from before a restart)."""
        layout = self.layout
        if self.meta is None or not await steps.zookeeper_answers_ruok(layout.host, layout.zk_port):
            return False
        if not all(child.running() and self._said_ready(child) for child in self.bookies):
            return False
        try:
            available = self.meta.layout.available
            await asyncio.wait_for(self.meta.zk.sync(available), 3.0)
            names = set(await asyncio.wait_for(self.meta.zk.get_children(available), 3.0))
        except (BKError, TimeoutError):
            return False
        return all(f"{bookie_alias(i)}:{layout.bookie_port(i)}" in names for i in range(layout.bookies))

    def log_size(self, index: int) -> int:
        return _size(self.bookie_specs[index].log_path)

    def index_failed_since(self, index: int, offset: int) -> bool:
        """Whether bookie ``index`` logged, after ``offset``, that an index write failed (it then
        stays read-only until restarted: see the README's read-only mode)."""
        try:
            with self.bookie_specs[index].log_path.open("rb") as f:
                f.seek(offset)
                return INDEX_FAILED_MARK in f.read()
        except OSError:
            return False

    def _said_ready(self, child: ChildProcess) -> bool:
        try:
            with child.spec.log_path.open("rb") as f:
                f.seek(self._log_offsets.get(child.name, 0))
                return READY_MARK in f.read()
        except OSError:
            return False

    # -- the disk ------------------------------------------------------------------------------

    @property
    def disk_dir(self) -> Path:
        return self.layout.ledger_dir(DISK_BOOKIE)

    def _mount_disk(self) -> None:
        target = self.disk_dir
        target.mkdir(parents=True, exist_ok=True)
        if not sys.platform.startswith("linux") or os.geteuid() != 0:
            self.disk_note = "disk-full left out: mounting a small filesystem needs root on Linux"
            return
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(target)],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            self.disk_note = f"disk-full left out: mount failed: {done.stderr.strip()}"
            return
        self.disk_mounted = True
        self.disk_note = f"disk-full on bookie-{DISK_BOOKIE}: its ledger directory is a {DISK_SIZE} tmpfs"

    def _unmount_disk(self) -> None:
        if self.disk_mounted:
            subprocess.run(["umount", "-l", str(self.disk_dir)], capture_output=True, check=False)
            self.disk_mounted = False

    def fill_disk(self) -> int:
        """Write a filler file until the filesystem refuses more; returns the bytes written."""
        written = 0
        block = b"\0" * (1024 * 1024)
        with (self.disk_dir / FILLER_NAME).open("ab", buffering=0) as f:
            while True:
                try:
                    n = f.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n or 0
        return written

    def empty_disk(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.disk_dir / FILLER_NAME).unlink()
