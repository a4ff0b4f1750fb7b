"""Garbage collection on real bookie processes with a real ZooKeeper: a ledger deleted through
the client loses its data on every bookie once an operator triggers a collection
(``PUT /api/v1/bookie/gc``), its entry logs are removed from disk, and the ledger kept beside it
reads back byte-identical, also from a restarted bookie on its own."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.support.bookies import BookieFactory, BookieProcess

from bkclient import BookKeeper, DigestType, NoSuchLedgerError
from bkmeta.metadata_client import MetadataClient
from bookie.storage.entry_logger import parse_log_name

pytestmark = pytest.mark.integration

PASSWORD = b"gc"
ENTRY = 16 * 1024
ENTRIES = 200  # 3.2 MiB per ledger: several 1 MiB entry logs of its own
# Small logs and frequent flushes, so each ledger's entries land in logs of their own quickly;
# collections run only when asked (the default gcWaitTime is 10 minutes).
CONF = {"logSizeLimit": "1048576", "flushInterval": "100"}


def _fetch(bookie: BookieProcess, method: str, path: str) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{bookie.http_port}{path}", method=method)
    with urllib.request.urlopen(request, timeout=10) as reply:
        body: bytes = reply.read()
        return body


def _http(bookie: BookieProcess, method: str, path: str) -> Any:
    return json.loads(_fetch(bookie, method, path))


def _entry_log_bytes(bookie: BookieProcess) -> int:
    return sum(
        path.stat().st_size
        for root in bookie.ledger_dirs
        for path in (Path(root) / "current").iterdir()
        if parse_log_name(path.name) is not None
    )


async def _write_ledger(bk: BookKeeper) -> tuple[int, list[bytes]]:
    handle = await bk.create_ledger(3, 3, 3, DigestType.CRC32C, PASSWORD)
    data = [os.urandom(ENTRY) for _ in range(ENTRIES)]
    await asyncio.gather(*(handle.append_async(d) for d in data))
    await handle.close()
    return handle.ledger_id, data


async def _read_ledger(bk: BookKeeper, ledger_id: int) -> list[bytes]:
    reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
    return [entry.data async for entry in reader.read(0, ENTRIES - 1)]


async def _collected(bookie: BookieProcess, runs: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (details,) = await asyncio.to_thread(_http, bookie, "GET", "/api/v1/bookie/gc_details")
        if details["gcCounter"] >= runs and not details["gcRunning"]:
            return dict(details)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{bookie}: no finished garbage collection within 30 s: {details}")


async def test_a_deleted_ledger_is_collected_and_the_other_survives(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookies = [await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=CONF) for _ in range(3)]
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        doomed, _ = await _write_ledger(bk)
        await asyncio.sleep(0.5)  # flushed: the next ledger's entries go to later logs
        kept, kept_data = await _write_ledger(bk)
        await asyncio.sleep(0.5)
        await bk.delete_ledger(doomed)
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(doomed, PASSWORD, recovery=False)

        before = [_entry_log_bytes(b) for b in bookies]
        for bookie in bookies:
            assert await asyncio.to_thread(_http, bookie, "GET", "/api/v1/bookie/gc") == {
                "is_in_force_gc": "false"
            }
            reply = await asyncio.to_thread(_http, bookie, "PUT", "/api/v1/bookie/gc")
            assert reply == {"message": "garbage collection triggered"}
        for bookie, size_before in zip(bookies, before, strict=True):
            details = await _collected(bookie, 1)
            assert details["deletedLedgerCounter"] == 1 and details["lastError"] is None
            reclaimed = size_before - _entry_log_bytes(bookie)
            # at least two logs of the deleted ledger alone were removed; the log it shares with
            # the kept ledger stays until compaction
            assert reclaimed == details["reclaimedDeletionSpaceBytes"] >= 2 * 1024 * 1024
            metrics = (await asyncio.to_thread(_fetch, bookie, "GET", "/metrics")).decode()
            assert "bookie_DELETED_LEDGER_COUNT_total 1.0" in metrics
            assert "bookie_ACTIVE_LEDGER_COUNT 1.0" in metrics

        assert await _read_ledger(bk, kept) == kept_data

    # the survivor, restarted, serves the kept ledger alone: its data and index came through
    for bookie in bookies[1:]:
        await asyncio.to_thread(bookie.stop)
    await asyncio.to_thread(bookies[0].restart)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 1, 30.0)
        assert await _read_ledger(bk, kept) == kept_data
