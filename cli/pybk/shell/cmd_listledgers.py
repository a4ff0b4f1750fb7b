"""``listledgers [-m]``: every ledger id in the cluster, optionally with its metadata."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bkproto.errors import NoSuchLedgerError
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import metadata_dict, metadata_lines

# Metadata reads in flight at once with -m: enough to hide ZooKeeper round trips, bounded so a
# cluster with a million ledgers does not queue a million requests.
METADATA_READ_CONCURRENCY = 32


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("listledgers", help="list all ledgers")
    parser.add_argument("-m", "--meta", action="store_true", help="print each ledger's metadata too")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    manager = meta.ledger_manager
    ledger_ids = sorted(await manager.list_ledgers())
    if not args.meta:
        ctx.emit({"ledgers": ledger_ids}, "\n".join(f"ledgerID: {lid}" for lid in ledger_ids))
        return 0

    limit = asyncio.Semaphore(METADATA_READ_CONCURRENCY)

    async def describe(ledger_id: int) -> dict[str, Any] | None:
        async with limit:
            try:
                versioned = await manager.read_ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                return None  # deleted between listing and reading
        return metadata_dict(ledger_id, versioned.value)

    found = [d for d in await asyncio.gather(*(describe(lid) for lid in ledger_ids)) if d is not None]
    ctx.emit({"ledgers": found}, "\n".join(line for d in found for line in metadata_lines(d)))
    return 0
