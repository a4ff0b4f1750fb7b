"""``deleteledger -l ID [-f]``: delete a ledger's metadata (bookies garbage-collect its entries).

Asks for confirmation on stdin unless ``-f``. When stdin gives no answer (closed, /dev/null, a
script without input) nothing is deleted and the exit code is 2: pass ``-f`` in scripts."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import refused


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("deleteledger", help="delete a ledger")
    parser.add_argument("-l", "--ledgerid", dest="ledger_id", type=non_negative, required=True,
                        metavar="ID", help="ledger id")
    parser.add_argument("-f", "--force", action="store_true", help="delete without asking")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    manager = meta.ledger_manager
    # Ask only about a ledger that exists (NoSuchLedgerError -> exit 1 before any prompt).
    await manager.read_ledger_metadata(args.ledger_id)
    if not args.force and (exit_code := await refused(
        ctx, f"Are you sure to delete ledger {args.ledger_id}?",
        f"deleteledger: no confirmation on stdin for ledger {args.ledger_id};"
        " pass -f to delete without asking",
        ({"ledger_id": args.ledger_id, "deleted": False}, f"ledger {args.ledger_id} not deleted"),
    )) is not None:
        return exit_code
    await manager.remove_ledger_metadata(args.ledger_id)
    ctx.emit({"ledger_id": args.ledger_id, "deleted": True}, f"ledger {args.ledger_id} deleted")
    return 0
