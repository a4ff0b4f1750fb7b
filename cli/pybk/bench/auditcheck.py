"""``pybk bench auditcheck``: the cost of autorecovery's periodic ledger check
(:mod:`autorecovery.checks`) on a running cluster: every registered bookie of every closed ledger
is asked which entries it holds, as the auditor does every ``auditorPeriodicCheckInterval``.
Reports entries compared per second; with ``--time`` it checks over and over for that long, so
that ``pybk bench writes`` run alongside measures the foreground add latency under it."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from autorecovery.checks import LedgerChecker, LedgerCheckResult
from bkclient import BookKeeper
from pybk import event_loop
from pybk.arg_types import non_negative, non_negative_float
from pybk.progress import Progress


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "auditcheck", help="time autorecovery's ledger check over every closed ledger"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("--rate", type=non_negative, default=10_000,
                        help="entries compared per second at most (auditorLedgerCheckEntriesPerSecond;"
                        " default 10000, 0: no limit)")
    parser.add_argument("--time", type=non_negative_float, default=0.0,
                        help="check again and again for this long (s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    async with await BookKeeper.connect(args.zk) as bk:
        checker = LedgerChecker(bk, args.rate)
        total = LedgerCheckResult()
        passes = 0
        started = time.monotonic()
        progress = Progress(None, unit="entries checked", quiet=args.json)
        while True:
            result = await checker.run()
            passes += 1
            progress.advance(result.entries_checked)
            total.ledgers_checked += result.ledgers_checked
            total.entries_checked += result.entries_checked
            total.missing_entries += result.missing_entries
            total.unchecked += result.unchecked
            if time.monotonic() - started >= args.time:
                break
        progress.done()
        elapsed = time.monotonic() - started
    return {
        "passes": passes, "ledgers_checked": total.ledgers_checked, "entries_checked": total.entries_checked,
        "missing_entries": total.missing_entries, "unanswered": total.unchecked,
        "elapsed_s": round(elapsed, 3),
        "entries_per_s": round(total.entries_checked / elapsed, 1) if elapsed > 0 else 0.0,
    }


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(_run(args))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bench auditcheck: {result['passes']} passes, {result['ledgers_checked']} ledgers,"
              f" {result['entries_checked']} entries in {result['elapsed_s']} s:"
              f" {result['entries_per_s']:,.0f} entries/s ({result['missing_entries']} missing)")
    return 0
