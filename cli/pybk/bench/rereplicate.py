"""``pybk bench rereplicate``: the load of autorecovery's repair on a running cluster. For every
closed ledger, every entry one bookie should hold is copied back to it as a replication worker
restores a bookie that lost them (:class:`autorecovery.restore.EntryRestorer`: read from another
replica, written as a RECOVERY_ADD, which the bookie takes again), paced by ``--rate-bytes``
(``replicationRateByBytes``). Nothing changes for readers: the bookie holds the same bytes. Run
``pybk bench writes`` alongside to see what repairs do to foreground adds."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from autorecovery.checks import expected_entries
from autorecovery.restore import EntryRestorer
from bkclient import BookKeeper
from bkclient.rate_limiter import ByteRateLimiter
from pybk import event_loop
from pybk.arg_types import non_negative, positive_float
from pybk.progress import Progress


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "rereplicate", help="copy a bookie's entries back to it, as autorecovery's repair does"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("--bookie", help="the bookie to restore (default: the first registered)")
    parser.add_argument("--rate-bytes", type=non_negative, default=0,
                        help="bytes/s at most (default 0: no limit)")
    parser.add_argument("--time", type=positive_float, default=30.0,
                        help="stop after this long (s; default 30)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    async with await BookKeeper.connect(args.zk) as bk:
        bookie = args.bookie or sorted(bk.ctx.bookie_watcher.writable_bookies())[0]
        throttle = ByteRateLimiter(args.rate_bytes) if args.rate_bytes > 0 else None
        entries = nbytes = 0
        started = time.monotonic()
        ledgers = await bk.list_ledgers()
        progress = Progress(len(ledgers), unit="ledgers", quiet=args.json, min_total=2)
        try:
            async with asyncio.timeout(args.time):
                for looked_at, ledger_id in enumerate(ledgers):
                    progress.update(looked_at)
                    md = await bk.ledger_metadata(ledger_id)
                    if not md.is_closed or bookie not in md.all_bookies():
                        continue
                    restorer = EntryRestorer(bk, ledger_id, md, bookie, throttle)
                    try:
                        await restorer.run(expected_entries(md, bookie, md.last_entry_id))
                    finally:
                        entries += restorer.entries_copied
                        nbytes += restorer.bytes_copied
        except TimeoutError:
            pass
        finally:
            progress.done()
        elapsed = time.monotonic() - started
    return {"bookie": bookie, "entries": entries, "bytes": nbytes, "elapsed_s": round(elapsed, 3),
            "entries_per_s": round(entries / elapsed, 1) if elapsed > 0 else 0.0}


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(_run(args))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bench rereplicate: {result['entries']} entries ({result['bytes']} bytes) back to"
              f" {result['bookie']} in {result['elapsed_s']} s: {result['entries_per_s']:,.0f} entries/s")
    return 0
