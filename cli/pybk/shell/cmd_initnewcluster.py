"""``initnewcluster``: create the cluster's znodes (idempotent; refuses a different cluster)."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "initnewcluster", help="create LAYOUT, INSTANCEID, available/, cookies/ under the ledgers root"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(require_cluster=False, watch_bookies=False)
    created = await meta.init_new_cluster()
    state = "created" if created else "already exists"
    ctx.emit(
        {"instance_id": meta.instance_id, "created": created, "ledgers_root": ctx.ledgers_root},
        f"cluster at {ctx.ledgers_root} {state}, instance id {meta.instance_id}",
    )
    return 0
