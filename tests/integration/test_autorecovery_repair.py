"""AutoRecovery repairs a bookie that is still registered but lost entries, on real bookie
processes and a real ZooKeeper: the auditor's periodic ledger check finds the missing entries,
marks the ledger under ``underreplication/ledgers``, and replication workers copy back exactly
those entries, one worker per ledger at a time (its lock), another taking over from a worker
killed mid-copy."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from tests.support.autorecovery import served_entries, service_metrics, should_hold, start_autorecovery
from tests.support.bookies import BookieFactory, BookieProcess, bookieformat_args
from tests.support.recover_cluster import (
    PASSWORD,
    new_cluster,
    pybk_shell,
    replicas_hold_every_entry,
)

from bkclient import BookKeeper, DigestType
from bkmeta.model import LedgerMetadata
from bkmeta.underreplication import UnderreplicationIndex

pytestmark = pytest.mark.integration

ENTRIES = 150
# the ledger check every second, the bookie check only on changes, a quick retry
FAST_CHECKS = {"auditorPeriodicCheckInterval": "1", "auditorPeriodicBookieCheckInterval": "0",
               "rwRereplicateBackoffMs": "500", "lostBookieRecoveryDelay": "3600"}


async def _closed_ledger(bk: BookKeeper, size: int = 1000) -> tuple[int, list[bytes], LedgerMetadata]:
    """E3 Qw2 Qa2 over the three bookies, ENTRIES entries, closed."""
    handle = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    data = [os.urandom(size) for _ in range(ENTRIES)]
    for payload in data:
        await handle.append(payload)
    await handle.close()
    return handle.ledger_id, data, await bk.ledger_metadata(handle.ledger_id)


def _wipe(zk_hosts: str, victim: BookieProcess) -> None:
    """Stop the bookie, format its directories and delete its cookie, start it again empty."""
    victim.stop()
    # forced: ledgers still name the bookie (bookieformat -d alone refuses: that is its guard)
    forced = pybk_shell(zk_hosts, "cookie_delete", victim.bookie_id, "-f")
    assert forced.returncode == 0, forced.stderr
    done = pybk_shell(zk_hosts, *bookieformat_args(victim, "-f"))
    assert done.returncode == 0, done.stderr
    victim.start()


def _delete_entry_logs(victim: BookieProcess) -> list[Path]:
    """Stop the bookie (it flushes), delete every entry log it wrote, start it again."""
    victim.stop()
    logs = [log for d in victim.ledger_dirs for log in (d / "current").glob("*.log")]
    for log in logs:
        log.unlink()
    victim.start()
    return logs


@contextlib.asynccontextmanager
async def _services(zk_hosts: str, tmp_path: Path, count: int, name: str = "autorecovery", **conf: str
                    ) -> AsyncIterator[
    list[tuple[subprocess.Popen[bytes], Path]]
]:
    started = []
    try:
        for n in range(count):
            log_path = tmp_path / f"{name}-{n}.log"
            started.append((start_autorecovery(zk_hosts, log_path, **conf), log_path))
        yield started
    finally:
        for service, _ in started:
            service.kill()
            await asyncio.to_thread(service.wait, 30)


class Damaged(NamedTuple):
    bookies: list[BookieProcess]
    victim: BookieProcess
    bk: BookKeeper
    ledger_id: int
    data: list[bytes]
    md: LedgerMetadata


@contextlib.asynccontextmanager
async def _damaged(zk_hosts: str, bookie_factory: BookieFactory, victim: int,
                   damage: Callable[[BookieProcess], object]) -> AsyncIterator[Damaged]:
    """Three bookies, a closed ledger over them, then ``damage`` done to bookie ``victim``
    (which is registered and writable again when this yields)."""
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        ledger_id, data, md = await _closed_ledger(bk)
        await asyncio.to_thread(damage, bookies[victim])
        bookie_id = bookies[victim].bookie_id
        await bk.ctx.bookie_watcher.wait_for(lambda w: bookie_id in w.writable_bookies(), 30.0)
        yield Damaged(bookies, bookies[victim], bk, ledger_id, data, md)


async def _until_restored(bk: BookKeeper, ledger_id: int, md: LedgerMetadata, bookie_id: str,
                          timeout_s: float = 90.0) -> None:
    index = UnderreplicationIndex(bk.ctx.metadata.zk, bk.ctx.metadata.layout)
    async with asyncio.timeout(timeout_s):
        while True:
            held = await served_entries(bk, ledger_id, bookie_id)
            if held == should_hold(md, bookie_id) and await index.get(ledger_id) is None:
                return
            await asyncio.sleep(0.5)


async def _check_all_there(bk: BookKeeper, bookies: list[BookieProcess], ledger_id: int, data: list[bytes],
                           md: LedgerMetadata) -> None:
    assert await bk.ledger_metadata(ledger_id) == md  # repaired in place: the ensemble is unchanged
    addresses = {b.bookie_id: b.address for b in bookies}
    await asyncio.to_thread(replicas_hold_every_entry, md, ledger_id, addresses)
    reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
    assert [e.data async for e in reader.read(0, ENTRIES - 1)] == data


async def test_a_wiped_bookie_gets_back_exactly_its_entries_from_one_of_two_racing_services(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    wipe = functools.partial(_wipe, zk_hosts)
    async with _damaged(zk_hosts, bookie_factory, 0, wipe) as (bookies, victim, bk, ledger_id, data, md):
        lost = should_hold(md, victim.bookie_id)
        assert await served_entries(bk, ledger_id, victim.bookie_id) == set()
        # two processes, two workers each: four workers race for the one marked ledger
        async with _services(zk_hosts, tmp_path, 2, numReplicationWorkers="2", **FAST_CHECKS) as services:
            await _until_restored(bk, ledger_id, md, victim.bookie_id)
            samples = [await asyncio.to_thread(service_metrics, log) for _, log in services]
        await _check_all_there(bk, bookies, ledger_id, data, md)
    written = "replication_worker_NUM_ENTRIES_WRITTEN"
    ledgers = "autorecovery_ledgers_rereplicated_total"
    total = {key: sum(s.get(key, 0.0) for s in samples) for key in (written, ledgers)}
    assert total == {written: len(lost), ledgers: 1}  # one worker repaired it, each lost entry once
    leader = next(s for s in samples if s["autorecovery_leader"] == 1)
    assert leader["auditor_NUM_MISSING_ENTRIES_FOUND"] >= len(lost)


async def test_a_deleted_entry_log_is_found_and_its_entries_copied_back(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    deleted: list[Path] = []

    def delete_logs(bookie: BookieProcess) -> None:
        deleted.extend(_delete_entry_logs(bookie))

    damaged = _damaged(zk_hosts, bookie_factory, 1, delete_logs)
    async with damaged as (bookies, victim, bk, ledger_id, data, md):
        assert deleted
        lost = should_hold(md, victim.bookie_id)
        assert not await served_entries(bk, ledger_id, victim.bookie_id) & lost
        async with _services(zk_hosts, tmp_path, 1, **FAST_CHECKS) as services:
            await _until_restored(bk, ledger_id, md, victim.bookie_id)
            metrics = await asyncio.to_thread(service_metrics, services[0][1])
        await _check_all_there(bk, bookies, ledger_id, data, md)
    assert metrics["replication_worker_NUM_ENTRIES_WRITTEN"] == len(lost)
    assert metrics["auditor_NUM_LEDGERS_CHECKED"] >= 1


async def test_a_worker_killed_mid_copy_leaves_its_lock_to_expire_and_another_finishes(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    wipe = functools.partial(_wipe, zk_hosts)
    async with _damaged(zk_hosts, bookie_factory, 2, wipe) as (bookies, victim, bk, ledger_id, data, md):
        index = UnderreplicationIndex(bk.ctx.metadata.zk, bk.ctx.metadata.layout)
        # about 10 s of copying at this rate: long enough to kill it in the middle
        slow = {**FAST_CHECKS, "replicationRateByBytes": "10000", "numReplicationWorkers": "1"}
        async with _services(zk_hosts, tmp_path, 1, **slow) as (first,):
            async with asyncio.timeout(60):
                while True:  # its worker holds the lock and copied some
                    holder = await index.lock_holder(ledger_id)
                    if holder is not None and await served_entries(bk, ledger_id, victim.bookie_id):
                        break
                    await asyncio.sleep(0.1)
                assert holder == f"{socket.gethostname()}:{first[0].pid}"
            first[0].kill()  # kill -9, mid-copy
        assert await served_entries(bk, ledger_id, victim.bookie_id) != should_hold(md, victim.bookie_id)
        assert await index.lock_holder(ledger_id) is not None  # until the dead session expires
        async with _services(zk_hosts, tmp_path, 1, "second", **FAST_CHECKS) as (second,):
            await _until_restored(bk, ledger_id, md, victim.bookie_id)
            metrics = await asyncio.to_thread(service_metrics, second[1])
        await _check_all_there(bk, bookies, ledger_id, data, md)
    assert metrics["replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED"] == 1
    rest = metrics["replication_worker_NUM_ENTRIES_WRITTEN"]
    assert 0 < rest < len(should_hold(md, victim.bookie_id))  # only what the first had not copied
