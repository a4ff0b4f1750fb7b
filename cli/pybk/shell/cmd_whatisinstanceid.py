"""``whatisinstanceid``: the cluster's instance id (``<root>/INSTANCEID``), which every cookie
carries and ``nukeexistingcluster --instanceid`` asks for."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "whatisinstanceid", help="print the cluster's instance id"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    ctx.emit({"instance_id": meta.instance_id, "ledgers_root": ctx.ledgers_root},
             f"instance id of the cluster at {ctx.ledgers_root}: {meta.instance_id}")
    return 0
