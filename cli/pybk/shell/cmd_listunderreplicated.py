"""``listunderreplicated [--missingreplica ID] [--excludingmissingreplica ID] [--printmissingreplica]
[-c]``: the under-replicated ledgers. As BookKeeper's command does, it lists the auditor's index
(``underreplication/ledgers``: what ``pybk autorecovery`` found, lost bookies and registered
bookies missing entries, not yet repaired); and it adds the ledgers with a replica on a bookie that
is gone (named by their metadata, registered neither as writable nor as read-only), worked out
from the ledgers' metadata and the registrations, so that it tells the truth with no autorecovery
running. That part reads every ledger's metadata once."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient.admin_views import underreplicated_ledgers
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import bookie_id, shell_client


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "listunderreplicated", help="list the ledgers with a replica on a bookie that is gone"
    )
    parser.add_argument("--missingreplica", type=bookie_id, metavar="ID",
                        help="only ledgers missing this bookie (host:port)")
    parser.add_argument("--excludingmissingreplica", type=bookie_id, metavar="ID",
                        help="only ledgers not missing this bookie (host:port)")
    parser.add_argument("--printmissingreplica", action="store_true",
                        help="print each ledger's missing bookies")
    parser.add_argument("-c", "--onlydisplayledgercount", action="store_true",
                        help="print the number of ledgers only")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    async with await shell_client(ctx) as bk:
        found = await underreplicated_ledgers(bk)
    ledgers = {
        ledger_id: sorted(missing) for ledger_id, missing in sorted(found.items())
        if (args.missingreplica is None or args.missingreplica in missing)
        and (args.excludingmissingreplica is None or args.excludingmissingreplica not in missing)
    }
    if args.onlydisplayledgercount:
        text = f"{len(ledgers)}"
    elif not ledgers:
        text = "no under-replicated ledgers"
    else:
        text = "\n".join(
            f"{ledger_id}\tmissing {', '.join(missing)}" if args.printmissingreplica else f"{ledger_id}"
            for ledger_id, missing in ledgers.items()
        )
    ctx.emit(
        {"count": len(ledgers),
         "ledgers": [{"ledger_id": i, "missing_replicas": m} for i, m in ledgers.items()]},
        text,
    )
    return 0
