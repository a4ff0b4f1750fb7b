"""``triggeraudit``: make the leading autorecovery check for lost bookies now and re-replicate every
lost one without waiting out lostBookieRecoveryDelay (BookKeeper's command, done the same way:
the cluster's delay is written again with its own value, which its auditor takes as "audit now").
Refused (exit 1), as BookKeeper refuses it, when no autorecovery leads or re-replication is
disabled: nothing would act on it."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient.admin_views import trigger_audit
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "triggeraudit", help="make autorecovery re-replicate lost bookies now"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    control = (await ctx.metadata(watch_bookies=False)).replication_control
    refusal = await trigger_audit(control)
    if refusal is not None:
        ctx.emit({"triggered": False, "reason": refusal}, f"audit not triggered: {refusal}")
        return EXIT_FAILED
    ctx.emit({"triggered": True}, "audit triggered")
    return 0
