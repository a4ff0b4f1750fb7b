"""``decommissionbookie --bookieid ID [-f]``: retire a stopped bookie for good (BookKeeper's
command of the same name). Every ledger it held is re-replicated onto other bookies (open ledgers
writing to it are fenced), then its cookie is deleted: nothing names the id any more, and its old
directories cannot rejoin the cluster. Refused (exit 1) while the bookie is registered. When a
ledger could not be re-replicated the cookie is kept and the exit code is 1: run it again."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient import BookKeeperAdmin
from pybk.shell.cmd_recover import ledger_json, ledger_lines, ledger_progress
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, add_rate_option, bookie_id, refused, shell_client


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "decommissionbookie", help="re-replicate a stopped bookie's ledgers and delete its cookie"
    )
    parser.add_argument("--bookieid", dest="bookie_id", type=bookie_id, required=True, metavar="ID",
                        help="the bookie to retire (host:port)")
    parser.add_argument("-f", "--force", action="store_true", help="decommission without asking")
    add_rate_option(parser)
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    if not args.force and (exit_code := await refused(
        ctx, f"Decommission {args.bookie_id}: re-replicate its ledgers (fencing open ones) and"
             " delete its cookie?",
        "decommissionbookie: no confirmation on stdin; pass -f to go ahead",
        ({"decommissioned": False}, "nothing done"),
    )) is not None:
        return exit_code
    async with await shell_client(ctx) as bk:
        admin = BookKeeperAdmin(bk, replication_rate_bytes=args.rate_bytes)
        with ledger_progress(ctx, "decommission") as progress:
            result = await admin.decommission_bookie(args.bookie_id, progress=progress.update)
    copied = sum(r.entries_copied for r in result.ledgers)
    if result.cookie_deleted:
        summary = (f"bookie {args.bookie_id} decommissioned: {len(result.ledgers)} ledger(s) re-replicated,"
                   f" {copied} entries copied, cookie deleted")
    else:
        left = [r.ledger_id for r in result.ledgers if not r.ok or r.skipped is not None]
        summary = (f"bookie {args.bookie_id} NOT decommissioned: ledgers {left} still name it;"
                   " cookie kept (run again)")
    ctx.emit(
        {"bookie_id": args.bookie_id, "decommissioned": result.cookie_deleted,
         "entries_copied": copied, "ledgers": [ledger_json(r) for r in result.ledgers]},
        "\n".join([*(line for r in result.ledgers for line in ledger_lines(r)), summary]),
    )
    return 0 if result.cookie_deleted else EXIT_FAILED
