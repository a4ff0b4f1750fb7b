"""The start-up steps that talk to the cluster: ZooKeeper readiness, cluster metadata, bookie
registration and the self-check through the real client.

Each step is a coroutine that either returns or raises; :class:`LocalCluster` bounds them with a
time limit and aborts early when a child process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from bkclient import BookKeeper
from bkmeta import MetadataClient, ZkClient, init_new_cluster
from bkmeta.zk import ZkNoNodeError
from bkmeta.zk_security import zk_security_from_environ
from bkproto.errors import BKError

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.2
SELF_CHECK_ENTRIES = 10
SELF_CHECK_PASSWORD = b"localcluster-self-check"


async def zookeeper_answers_ruok(host: str, port: int) -> bool:
    """One ``ruok`` four-letter probe without blocking the loop."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=2.0)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"ruok")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(16), timeout=2.0)
        return answer.startswith(b"imok")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def wait_for_zookeeper(host: str, port: int) -> None:
    """Return once ZooKeeper answers ``imok`` (the caller bounds the wait)."""
    while True:
        if await zookeeper_answers_ruok(host, port):
            return
        await asyncio.sleep(POLL_INTERVAL_S)


# Loopback only: an http_proxy in the environment must not see (or break) the probe.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


async def wait_for_metric(url: str, sample: str) -> None:
    """Return once the Prometheus text at ``url`` holds the line ``sample`` (the caller bounds
    the wait)."""
    def holds() -> bool:
        try:
            with _DIRECT.open(url, timeout=2.0) as reply:
                return sample in reply.read().decode(errors="replace").splitlines()
        except OSError:
            return False

    while True:
        if await asyncio.to_thread(holds):
            return
        await asyncio.sleep(POLL_INTERVAL_S)


async def initialise_cluster(zk_hosts: str) -> bool:
    """Create the cluster metadata unless it exists. True if it was created now."""
    async with ZkClient.for_hosts(zk_hosts, security=zk_security_from_environ()) as zk:
        instance_id, created = await init_new_cluster(zk)
    log.info("cluster instance %s (%s)", instance_id, "created" if created else "existing")
    return created


async def wait_for_bookies(zk_hosts: str, ports: set[int], not_before_ms: int) -> list[str]:
    """Return the registered ids of the bookies listening on ``ports``, once each of them is
    registered as writable by a znode created at or after ``not_before_ms`` (ms since the epoch).

    The age check matters on a restart after a crash: ZooKeeper keeps a killed bookie's session,
    and so its ephemeral registration, until the session times out, so a registration may still
    belong to the previous run while the new bookie is not serving yet (it waits for that
    session to expire before registering itself)."""
    async with await MetadataClient.connect(zk_hosts) as meta:
        watcher = meta.bookie_watcher

        def ours() -> dict[int, str]:
            return {
                info.grpc_port: bookie_id
                for bookie_id, info in watcher.writable_bookies().items()
                if info.grpc_port in ports
            }

        while True:
            # The caller bounds the whole step; the watcher's own limit is only a backstop.
            await watcher.wait_for(lambda _: set(ours()) == ports, timeout_s=24 * 3600.0)
            found = ours()
            if not await _any_stale(meta, found.values(), not_before_ms):
                return [found[p] for p in sorted(ports)]
            await asyncio.sleep(POLL_INTERVAL_S)


async def _any_stale(meta: MetadataClient, bookie_ids: Iterable[str], not_before_ms: int) -> bool:
    for bookie_id in bookie_ids:
        try:
            _, stat = await meta.zk.get(meta.layout.writable_bookie(bookie_id))
        except ZkNoNodeError:
            return True  # gone since the watcher saw it
        if stat.ctime < not_before_ms:
            log.info("registration of %s is from an earlier run; waiting for a fresh one", bookie_id)
            return True
    return False


@dataclass(frozen=True)
class SelfCheckResult:
    ledger_id: int
    ensemble: int
    write_quorum: int
    ack_quorum: int
    entries: int
    elapsed_s: float


def self_check_quorums(bookies: int) -> tuple[int, int, int]:
    """The widest replication the cluster allows, up to BookKeeper's usual 3/2/2."""
    ensemble = min(3, bookies)
    quorum = min(2, bookies)
    return ensemble, quorum, quorum


async def run_self_check(zk_hosts: str, bookies: int) -> SelfCheckResult:
    """Write a replicated ledger, close it, read every entry back byte for byte, delete it."""
    ensemble, write_quorum, ack_quorum = self_check_quorums(bookies)
    started = time.monotonic()
    payloads = [f"self-check entry {i} ".encode() + os.urandom(16) for i in range(SELF_CHECK_ENTRIES)]
    async with await BookKeeper.connect(zk_hosts) as bk:
        writer = await bk.create_ledger(
            ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
            password=SELF_CHECK_PASSWORD, custom_metadata={"application": b"pybk-localcluster-self-check"},
        )
        ledger_id = writer.ledger_id
        try:
            for payload in payloads:
                await writer.append(payload)
            await writer.close()
            reader = await bk.open_ledger(ledger_id, password=SELF_CHECK_PASSWORD, recovery=False)
            read_back = [entry.data async for entry in reader.read(0, reader.last_add_confirmed)]
            if read_back != payloads:
                raise SelfCheckError(
                    f"self-check ledger {ledger_id}: wrote {len(payloads)} entries, read back "
                    f"{len(read_back)} and they differ"
                )
        finally:
            # The check's ledger is not the user's data: leave ZooKeeper as the user expects it.
            with contextlib.suppress(BKError):
                await bk.delete_ledger(ledger_id)
    return SelfCheckResult(
        ledger_id, ensemble, write_quorum, ack_quorum, len(payloads), time.monotonic() - started
    )


class SelfCheckError(RuntimeError):
    """What the self-check read back is not what it wrote."""
