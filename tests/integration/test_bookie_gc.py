"""Garbage collection on real bookie processes with a real ZooKeeper: ledgers deleted through
the client lose their data on every bookie once an operator triggers a collection
(``PUT /api/v1/bookie/gc``): entry logs holding only deleted ledgers are removed, a forced major
compaction rewrites the logs they share with a live ledger, and the live ledger reads back
byte-identical, also from a restarted bookie on its own."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.support.admin_http import get_ok_json, get_ok_text
from tests.support.bookie_gc import GC_DETAILS, gc_runs_finished, trigger_gc
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
CONF = {"logSizeLimit": "1048576", "flushInterval": "100", "compactionRateByBytes": "0"}


def _entry_log_bytes(bookie: BookieProcess) -> int:
    return sum(_entry_logs(bookie).values())


def _entry_logs(bookie: BookieProcess) -> dict[str, int]:
    """Each entry log's name and size, for a failure to show how the flushes laid them out."""
    return {
        path.name: path.stat().st_size
        for root in bookie.ledger_dirs
        for path in sorted((Path(root) / "current").iterdir())
        if parse_log_name(path.name) is not None
    }


async def _write_ledgers(
    bk: BookKeeper, count: int, entries: int, pace: float = 0.0
) -> list[tuple[int, list[bytes]]]:
    """``count`` ledgers written side by side, ``pace`` seconds between rounds.

    A flush writes the write cache ledger by ledger, so ledgers written side by side share an
    entry log only in slices as large as one flush holds of each. Paced well below the flush
    interval, every log they fill holds about as much of one as of the other."""
    handles = [await bk.create_ledger(3, 3, 3, DigestType.CRC32C, PASSWORD) for _ in range(count)]
    data = [[os.urandom(ENTRY) for _ in range(entries)] for _ in handles]
    for i in range(entries):
        await asyncio.gather(*(h.append_async(d[i]) for h, d in zip(handles, data, strict=True)))
        if pace:
            await asyncio.sleep(pace)
    for handle in handles:
        await handle.close()
    return [(h.ledger_id, d) for h, d in zip(handles, data, strict=True)]


async def _read_ledger(bk: BookKeeper, ledger_id: int) -> list[bytes]:
    reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
    return [entry.data async for entry in reader.read(0, reader.last_add_confirmed)]


async def test_deleted_ledgers_are_collected_and_compacted_and_the_live_one_survives(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    # one ledger dir: two ledgers written together then share entry logs (with several dirs,
    # consecutive ledger ids land in different dirs)
    bookies = [
        await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=CONF, ledger_dirs=1) for _ in range(3)
    ]
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        ((alone, _),) = await _write_ledgers(bk, 1, ENTRIES)  # logs of its own
        await asyncio.sleep(0.5)  # flushed: the next entries go to later logs
        # logs half each: about 5 rounds (80 KiB of each ledger) per 100 ms flush
        (shared, _), (kept, kept_data) = await _write_ledgers(bk, 2, ENTRIES // 2, pace=0.02)
        # The log being written is never compacted, and which entries end up in it depends on
        # how the flushes happened to batch them. A live filler larger than a log, written last
        # (a higher ledger id, so after the others in any flush), leaves the current log to itself.
        await _write_ledgers(bk, 1, 160)  # 2.5 MiB
        await asyncio.sleep(0.5)
        for ledger_id in (alone, shared):
            await bk.delete_ledger(ledger_id)
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(alone, PASSWORD, recovery=False)

        # 1. collection only: the logs of the first ledger alone go
        before = [_entry_log_bytes(b) for b in bookies]
        for bookie in bookies:
            assert await asyncio.to_thread(get_ok_json, bookie.http_port, "/api/v1/bookie/gc") == {
                "is_in_force_gc": "false"
            }
            no_compaction = b'{"forceMajor": false, "forceMinor": false}'
            reply = await asyncio.to_thread(trigger_gc, bookie, no_compaction)
            assert reply == {"message": "garbage collection triggered"}
        for bookie, size_before in zip(bookies, before, strict=True):
            details = await gc_runs_finished(bookie, 1)
            assert details["deletedLedgerCounter"] == 2 and details["lastError"] is None
            assert details["majorCompactionCounter"] == details["minorCompactionCounter"] == 0
            reclaimed = size_before - _entry_log_bytes(bookie)
            assert reclaimed == details["reclaimedDeletionSpaceBytes"] >= 2 * 1024 * 1024
            metrics = await asyncio.to_thread(get_ok_text, bookie.http_port, "/metrics")
            assert "bookie_DELETED_LEDGER_COUNT 2.0" in metrics
            assert "bookie_ACTIVE_LEDGER_COUNT 2.0" in metrics  # kept and filler

        # 2. forced (major) compaction: the logs the deleted ledger shared with the kept one
        before = [_entry_log_bytes(b) for b in bookies]
        for bookie in bookies:
            await asyncio.to_thread(trigger_gc, bookie, None)
        for bookie, size_before in zip(bookies, before, strict=True):
            details = await gc_runs_finished(bookie, 2)
            assert details["majorCompactionCounter"] == 1 and details["lastError"] is None
            reclaimed = size_before - _entry_log_bytes(bookie)
            assert reclaimed >= 1024 * 1024, (reclaimed, details, _entry_logs(bookie))  # ~half of 3.2 MiB
            metrics = await asyncio.to_thread(get_ok_text, bookie.http_port, "/metrics")
            assert "bookie_MAJOR_COMPACTION_COUNT 1.0" in metrics

        assert await _read_ledger(bk, kept) == kept_data

    # the survivor, restarted, serves the kept ledger alone: its data and index came through
    for bookie in bookies[1:]:
        await asyncio.to_thread(bookie.stop)
    await asyncio.to_thread(bookies[0].restart)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 1, 30.0)
        assert await _read_ledger(bk, kept) == kept_data


async def test_a_bad_gc_request_is_refused_and_the_bookie_carries_on(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=CONF)
    for body, why in (
        (b"not json", "body is not JSON"),
        (b"[1]", "expected a JSON object"),
        (b'{"forceMajor": "yes"}', "forceMajor must be true or false"),
    ):
        with pytest.raises(urllib.error.HTTPError) as info:
            await asyncio.to_thread(trigger_gc, bookie, body)
        assert info.value.code == 400 and why in info.value.read().decode()
    assert await asyncio.to_thread(trigger_gc, bookie, b"{}") == {"message": "garbage collection triggered"}
    details = await gc_runs_finished(bookie, 1)
    assert details["gcCounter"] == 1 and details["lastError"] is None


def _put(bookie: BookieProcess, path: str, body: bytes) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{bookie.http_port}{path}", data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


async def test_an_operator_suspends_and_resumes_compaction(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    """BookKeeper's ``/api/v1/bookie/gc/suspend_compaction`` and ``.../resume_compaction``: a
    suspended kind is skipped by the next collections, even forced ones; collection goes on."""
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=CONF)
    suspend, resume = "/api/v1/bookie/gc/suspend_compaction", "/api/v1/bookie/gc/resume_compaction"
    for path, body, why in (
        (suspend, b"{}", "nothing to suspend"),
        (resume, b'{"resumeMajor": "yes"}', "resumeMajor must be true or false"),
        (suspend, b"[]", "expected a JSON object"),
    ):
        with pytest.raises(urllib.error.HTTPError) as info:
            await asyncio.to_thread(_put, bookie, path, body)
        assert info.value.code == 400 and why in info.value.read().decode()
    assert await asyncio.to_thread(get_ok_json, bookie.http_port, suspend) == {
        "isMajorGcSuspended": "false", "isMinorGcSuspended": "false"
    }
    both = b'{"suspendMajor": "true", "suspendMinor": "true"}'  # BookKeeper's documented body
    reply = await asyncio.to_thread(_put, bookie, suspend, both)
    assert reply == {"isMajorGcSuspended": "true", "isMinorGcSuspended": "true"}
    await asyncio.to_thread(trigger_gc, bookie, None)  # forced major and minor: both skipped
    details = await gc_runs_finished(bookie, 1)
    assert details["majorCompactionCounter"] == details["minorCompactionCounter"] == 0
    assert details["majorCompactionSuspended"] and details["minorCompactionSuspended"]

    reply = await asyncio.to_thread(_put, bookie, resume, b'{"resumeMinor": true}')
    assert reply == {"isMajorGcSuspended": "true", "isMinorGcSuspended": "false"}
    await asyncio.to_thread(trigger_gc, bookie, None)
    details = await gc_runs_finished(bookie, 2)
    assert (details["majorCompactionCounter"], details["minorCompactionCounter"]) == (0, 1)

    await asyncio.to_thread(_put, bookie, resume, b'{"resumeMajor": true}')
    await asyncio.to_thread(trigger_gc, bookie, None)
    details = await gc_runs_finished(bookie, 3)
    assert (details["majorCompactionCounter"], details["minorCompactionCounter"]) == (1, 1)


async def test_kill_9_in_the_middle_of_a_compaction_loses_nothing(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    slow = {**CONF, "compactionRateByBytes": "300000"}  # ~2 s per half-live 1 MiB log
    bookies = [
        await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=conf, ledger_dirs=1)
        for conf in (slow, CONF, CONF)
    ]
    victim = bookies[0]
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        (doomed, _), (kept, kept_data) = await _write_ledgers(bk, 2, ENTRIES)  # every log half each
        await asyncio.sleep(0.5)
        await bk.delete_ledger(doomed)
    logs_before = _entry_log_bytes(victim)
    await asyncio.to_thread(trigger_gc, victim, None)
    deadline = time.monotonic() + 30
    while not (await asyncio.to_thread(get_ok_json, victim.http_port, GC_DETAILS))[0]["majorCompacting"]:
        assert time.monotonic() < deadline, "compaction did not start"
        await asyncio.sleep(0.05)
    await asyncio.sleep(2.5)  # a log or so rewritten, the next one part-way
    await asyncio.to_thread(victim.kill9)
    assert _entry_log_bytes(victim) != logs_before  # the crash really came mid-compaction

    victim.write_conf(CONF)  # restarted at full speed: the rest of the job is quick
    await asyncio.to_thread(victim.start)
    for bookie in bookies[1:]:  # from here on the victim serves every read alone
        await asyncio.to_thread(bookie.stop)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 1, 30.0)
        assert await _read_ledger(bk, kept) == kept_data
        await asyncio.to_thread(trigger_gc, victim, None)  # finish the job after the restart
        details = await gc_runs_finished(victim, 1)
        assert details["majorCompactionCounter"] == 1 and details["lastError"] is None
        assert await _read_ledger(bk, kept) == kept_data
    assert _entry_log_bytes(victim) < logs_before * 0.7
