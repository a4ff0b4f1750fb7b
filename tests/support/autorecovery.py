"""``pybk autorecovery`` processes for the integration tests (started, watching a cluster of real
bookies) and what they show: their log, their Prometheus samples, and which bookie entries a
ledger's replicas can serve (asked of each bookie, as the auditor's ledger check does)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

from autorecovery.checks import expected_entries
from bkclient import BookKeeper
from bkmeta.model import LedgerMetadata
from bkproto.errors import NoSuchLedgerError
from tests.support.bookies import BookieFactory, BookieProcess
from tests.support.recover_cluster import FAST_EXPIRY, new_cluster


def service_metrics(log_path: Path, prefixes: tuple[str, ...] = ("autorecovery_", "auditor_",
                                                                  "replication_worker_")) -> dict[str, float]:
    """The service's Prometheus samples whose names start with one of ``prefixes`` (its port is
    in its log, once it has started: on a busy box a second service may still be importing)."""
    deadline = time.monotonic() + 60
    while (port := re.search(r"metrics on http port (\d+)", log_path.read_text())) is None:
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.2)
    with urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.partition(" ") for line in lines)
            if name.startswith(prefixes)}


async def served_entries(bk: BookKeeper, ledger_id: int, bookie_id: str) -> set[int]:
    """The entry ids ``bookie_id`` says it can serve for the ledger (GetListOfEntriesOfLedger)."""
    try:
        runs = await bk.ctx.bookie(bookie_id).list_entries(ledger_id)
    except NoSuchLedgerError:
        return set()
    return {e for first, last in runs for e in range(first, last + 1)}


def should_hold(md: LedgerMetadata, bookie_id: str) -> set[int]:
    """The entries of closed ``md`` its striping puts on ``bookie_id``."""
    return set(expected_entries(md, bookie_id, md.last_entry_id))


def start_autorecovery(zk_hosts: str, log_path: Path, **conf: str) -> subprocess.Popen[bytes]:
    """``pybk autorecovery`` with its metrics on a free port (logged), configured by BK_ vars."""
    env = {**os.environ, **{f"BK_{key}": value for key, value in conf.items()}}
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "pybk", "autorecovery", "--zk", zk_hosts, "--http-port", "0"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )


@contextlib.asynccontextmanager
async def running_autorecovery(
    zk_hosts: str, log_path: Path, **conf: str
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """:func:`start_autorecovery`, stopped with SIGTERM on the way out (its exit code is then
    ``returncode``)."""
    service = start_autorecovery(zk_hosts, log_path, **conf)
    try:
        yield service
    finally:
        service.send_signal(signal.SIGTERM)
        await asyncio.to_thread(service.wait, 30)


class Watched(NamedTuple):
    bookies: list[BookieProcess]
    bk: BookKeeper
    service: subprocess.Popen[bytes]


@contextlib.asynccontextmanager
async def watched_cluster(
    zk_hosts: str, bookie_factory: BookieFactory, log_path: Path, **conf: str
) -> AsyncIterator[Watched]:
    """Four bookies whose registrations go 4 s after a kill -9, an autorecovery process watching
    them, and a client that sees all four."""
    bookies = await new_cluster(zk_hosts, bookie_factory, 4, FAST_EXPIRY)
    async with (
        running_autorecovery(zk_hosts, log_path, **conf) as service,
        await BookKeeper.connect(zk_hosts) as bk,
    ):
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 4, 30.0)
        yield Watched(bookies, bk, service)


async def until_logged(log_path: Path, text: str, timeout_s: float = 15.0) -> None:
    """Until the service's log holds ``text`` (it reports only in its log)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while text not in (log := await asyncio.to_thread(log_path.read_text)):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {text!r} in the autorecovery log:\n{log}")
        await asyncio.sleep(0.2)
