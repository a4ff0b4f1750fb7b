"""``listledgers [-m] [--bookieid ID]``: every ledger id in the cluster, optionally with its metadata,
or only those whose metadata names one bookie (BookKeeper's ``-bookieid``)."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient.admin_views import metadata_dict, read_metadata_many
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import bookie_id, metadata_lines


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("listledgers", help="list all ledgers")
    parser.add_argument("-m", "--meta", action="store_true", help="print each ledger's metadata too")
    parser.add_argument("--bookieid", dest="bookie_id", type=bookie_id, metavar="ID",
                        help="only the ledgers with a replica on this bookie (host:port)")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    manager = meta.ledger_manager
    ledger_ids = sorted(await manager.list_ledgers())
    if not args.meta and args.bookie_id is None:
        ctx.emit({"ledgers": ledger_ids}, "\n".join(f"ledgerID: {lid}" for lid in ledger_ids))
        return 0

    def skipped(ledger_id: int, exc: Exception) -> None:
        ctx.warn(f"listledgers: ledger {ledger_id} skipped: {exc}")

    found = [
        metadata_dict(ledger_id, versioned.value)
        for ledger_id, versioned in await read_metadata_many(manager, ledger_ids, skipped)
        if args.bookie_id is None or args.bookie_id in versioned.value.all_bookies()
    ]
    if not args.meta:
        ids = [d["ledger_id"] for d in found]
        ctx.emit({"ledgers": ids}, "\n".join(f"ledgerID: {lid}" for lid in ids))
        return 0
    ctx.emit({"ledgers": found}, "\n".join(line for d in found for line in metadata_lines(d)))
    return 0
