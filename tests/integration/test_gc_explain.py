"""``gcexplain`` on a real bookie process with a real ZooKeeper, on the case operators complain
about: a few long-lived ledgers written interleaved with short-lived ones pin every entry log
above the compaction threshold once the short ones are deleted. The explainer names the pinning
ledgers and the threshold, and once the ledger it names is deleted, the next forced collection
reclaims exactly the bytes it said."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from tests.support.admin_http import get_ok_json, get_ok_text
from tests.support.bookie_gc import GC_DETAILS, gc_runs_finished, trigger_gc
from tests.support.bookies import BookieFactory
from tests.support.recover_cluster import pybk_shell

from bkclient import BookKeeper, DigestType
from bkmeta.metadata_client import MetadataClient

pytestmark = pytest.mark.integration

PASSWORD = b"gc-explain"
ENTRY = 16 * 1024

# 1 MiB logs, flushed often; collections only when asked; compaction of logs under 40 % live
CONF = {"logSizeLimit": "1048576", "flushInterval": "100", "compactionRateByBytes": "0",
        "majorCompactionThreshold": "0.4", "minorCompactionThreshold": "0.1"}
ROUNDS = 100  # 4 ledgers x 100 x 16 KiB: about six logs, each a quarter of every ledger


def _metric(text: str, name: str) -> float:
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " "))


def _finished(report: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in report if r["verdict"] != "being_written"]


async def test_the_explainer_names_the_pinning_ledgers_and_what_deleting_them_frees(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=CONF, ledger_dirs=1)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 1, 30.0)
        handles = [await bk.create_ledger(1, 1, 1, DigestType.CRC32C, PASSWORD) for _ in range(4)]
        # written side by side: the long-lived pair holds half of every log
        long_a, long_b, short_a, short_b = handles
        for _ in range(ROUNDS):
            await asyncio.gather(*(h.append_async(os.urandom(ENTRY)) for h in handles))
        for handle in handles:
            await handle.close()
        await asyncio.sleep(0.5)  # flushed to the entry logs
        for handle in (short_a, short_b):
            await bk.delete_ledger(handle.ledger_id)
        await asyncio.to_thread(trigger_gc, bookie, b'{"forceMajor": false, "forceMinor": false}')
        await gc_runs_finished(bookie, 1)  # the short ones are collected; no compaction

        report = await asyncio.to_thread(get_ok_json, bookie.http_port, "/api/v1/bookie/gc_explain")
        longs = {long_a.ledger_id, long_b.ledger_id}
        for log in _finished(report):  # every claim checks out against the log's own numbers
            assert {p["ledger_id"] for p in log["pinned_by"]} <= longs  # the short ones pin nothing
            assert all(p["state"] == "live" for p in log["pinned_by"])
            live = sum(p["bytes"] for p in log["pinned_by"])
            assert log["live_bytes"] == live and log["reclaimable_bytes"] == log["size_bytes"] - live
            if log["live_share"] >= 0.4:
                assert log["verdict"] == "above_threshold", log
                # the report rounds the share to 4 places, the sentence the margin to 3: compare loosely
                margin = float(log["why"].split("above the major threshold 0.4 by ")[1].split()[0])
                assert abs(margin - (log["live_share"] - 0.4)) < 0.0011, log["why"]
                named = log["would_free_it"]["delete_ledgers"]
                assert named and set(named) <= longs
            else:  # a log the interleaving left nearly empty is the next minor compaction's
                kind = "minor" if log["live_share"] < 0.1 else "major"
                assert log["verdict"] == f"waiting_{kind}", log
        pinned = [log for log in report if log["verdict"] == "above_threshold"]
        assert len(pinned) >= 2, report  # the seed's case: logs kept by a few long-lived ledgers
        # sorted by what could be reclaimed
        assert [r["reclaimable_bytes"] for r in report] == sorted((r["reclaimable_bytes"] for r in report),
                                                                   reverse=True)
        shell = await asyncio.to_thread(pybk_shell, zk_hosts, "gcexplain", bookie.bookie_id)
        assert shell.returncode == 0, shell.stderr
        assert len(json.loads(shell.stdout)["entry_logs"]) == len(report)
        metrics = await asyncio.to_thread(get_ok_text, bookie.http_port, "/metrics")
        assert _metric(metrics, "bookie_gc_RECLAIMABLE_BYTES") > 0
        assert _metric(metrics, "bookie_gc_OLDEST_ENTRY_LOG_AGE_SECONDS") >= 0

        # deleting what it named puts those logs under the threshold: the next run frees what it said
        named = {lid for log in pinned for lid in log["would_free_it"]["delete_ledgers"]}
        for ledger_id in sorted(named):
            await bk.delete_ledger(ledger_id)
        report = await asyncio.to_thread(get_ok_json, bookie.http_port, "/api/v1/bookie/gc_explain")
        finished = _finished(report)
        assert all(log["verdict"] in ("waiting_major", "next_gc_run") for log in finished), finished
        said = sum(log["reclaimable_bytes"] for log in finished)
        before = _metric(metrics, "bookie_RECLAIMED_COMPACTION_SPACE_BYTES")
        (details,) = await asyncio.to_thread(get_ok_json, bookie.http_port, GC_DETAILS)
        await asyncio.to_thread(trigger_gc, bookie, None)  # forced major compaction
        after_details = await gc_runs_finished(bookie, 2)
        metrics = await asyncio.to_thread(get_ok_text, bookie.http_port, "/metrics")
        freed = (_metric(metrics, "bookie_RECLAIMED_COMPACTION_SPACE_BYTES") - before
                 + after_details["reclaimedDeletionSpaceBytes"] - details["reclaimedDeletionSpaceBytes"])
        assert freed == said
        for handle in (long_a, long_b):  # the one not deleted reads back in full
            if handle.ledger_id not in named:
                reader = await bk.open_ledger(handle.ledger_id, PASSWORD, recovery=False)
                assert len([e async for e in reader.read(0, ROUNDS - 1)]) == ROUNDS
