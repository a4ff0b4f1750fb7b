"""``queryautorecoverystatus [-v]``: what autorecovery is doing now (BookKeeper's command): the
ledgers marked under-replicated (``underreplication/ledgers``) with the replicas they are short
of, since when, and which autorecovery process is repairing each (the holder of its lock), plus
whether re-replication is enabled and who leads. Reads only the index, never ledger metadata."""

from __future__ import annotations

import argparse
import time
from typing import Any

from bkmeta.underreplication import UnderreplicationIndex
from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "queryautorecoverystatus", help="list the ledgers autorecovery is to repair, and who repairs them"
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print each ledger's missing replicas")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    control = meta.replication_control
    index = UnderreplicationIndex(meta.zk, meta.layout)
    now_ms = int(time.time() * 1000)
    markers = await index.markers()
    holders = [await index.lock_holder(m.ledger_id) for m in markers]
    enabled = await control.is_enabled()
    auditor = await control.auditor()
    lines = [f"autorecovery {'enabled' if enabled else 'DISABLED'}; auditor: {auditor or 'none'}"]
    if not markers:
        lines.append("no under-replicated ledgers")
    for marker, holder in zip(markers, holders, strict=True):
        ago = max(0, now_ms - marker.ctime_ms) // 1000
        line = f"ledger {marker.ledger_id}: marked {ago} s ago, "
        line += f"being repaired by {holder}" if holder else "waiting for a worker"
        if args.verbose:
            line += f", missing {', '.join(sorted(marker.replicas))}"
        lines.append(line)
    ledgers = [
        {"ledger_id": m.ledger_id, "missing_replicas": sorted(m.replicas), "ctime_ms": m.ctime_ms,
         "being_repaired_by": holder}
        for m, holder in zip(markers, holders, strict=True)
    ]
    ctx.emit({"enabled": enabled, "auditor": auditor, "ledgers": ledgers}, "\n".join(lines))
    return 0
