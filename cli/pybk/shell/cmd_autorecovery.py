"""``autorecovery [-e | -d | -s]``: enable, disable or show ledger re-replication for the whole
cluster (BookKeeper's shell command of the same name, and the same ZooKeeper znode, so either
shell works on either cluster). Disable it before maintenance that stops bookies for a while,
such as a rolling restart, so that ``pybk autorecovery`` does not copy their data meanwhile; a
bookie lost while it is disabled is re-replicated once it is enabled again. Without an option it
shows the state."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "autorecovery", help="enable, disable or show automatic re-replication of lost bookies"
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("-e", "--enable", action="store_true", help="let autorecovery re-replicate")
    action.add_argument("-d", "--disable", action="store_true", help="stop autorecovery from re-replicating")
    action.add_argument("-s", "--status", action="store_true", help="show whether it is enabled (default)")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    control = (await ctx.metadata(watch_bookies=False)).replication_control
    if args.enable:
        changed = await control.enable()
        text = "autorecovery enabled" if changed else "autorecovery was already enabled"
    elif args.disable:
        changed = await control.disable()
        text = "autorecovery disabled" if changed else "autorecovery was already disabled"
    else:
        changed = False
        text = ""
    enabled = await control.is_enabled()
    text = text or f"autorecovery is {'enabled' if enabled else 'disabled'}"
    ctx.emit({"enabled": enabled, "changed": changed}, text)
    return 0
