"""``whoisauditor``: which ``pybk autorecovery`` process leads the cluster's autorecovery
(BookKeeper's command of the same name). Exit code 1 when none does."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "whoisauditor", help="print which autorecovery process leads"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    auditor = await (await ctx.metadata(watch_bookies=False)).replication_control.auditor()
    if auditor is None:
        ctx.emit({"auditor": None}, "no autorecovery is leading (is pybk autorecovery running?)")
        return EXIT_FAILED
    ctx.emit({"auditor": auditor}, f"auditor: {auditor}")
    return 0
