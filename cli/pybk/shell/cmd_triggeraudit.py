"""``triggeraudit``: make the leading autorecovery check for lost bookies now and re-replicate every
lost one without waiting out lostBookieRecoveryDelay (BookKeeper's command, done the same way:
the cluster's delay is written again with its own value, which its auditor takes as "audit now")."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "triggeraudit", help="make autorecovery re-replicate lost bookies now"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    control = (await ctx.metadata(watch_bookies=False)).replication_control
    delay = await control.lost_bookie_delay()
    if delay is None:
        ctx.emit({"triggered": False},
                 "no autorecovery has led this cluster yet (no lostBookieRecoveryDelay): nothing to trigger")
        return EXIT_FAILED
    await control.set_lost_bookie_delay(delay)
    ctx.emit({"triggered": True}, "audit triggered")
    return 0
