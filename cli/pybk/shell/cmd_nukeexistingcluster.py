"""``nukeexistingcluster --force | --instanceid ID``: delete the whole ledgers root.

Refuses while any bookie is registered; all ledger metadata is lost, so it needs an explicit
``--force`` or the cluster's instance id (as BookKeeper's shell does)."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta import nuke_existing_cluster
from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "nukeexistingcluster", help="delete all cluster metadata (needs --force or --instanceid)"
    )
    parser.add_argument("--force", action="store_true", help="delete without checking the instance id")
    parser.add_argument("--instanceid", default=None, help="delete only if the cluster has this instance id")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(require_cluster=False, watch_bookies=False)
    deleted = await nuke_existing_cluster(
        meta.zk, meta.layout, force=args.force, instance_id=args.instanceid
    )
    ctx.emit(
        {"deleted": deleted, "ledgers_root": ctx.ledgers_root},
        f"cluster at {ctx.ledgers_root} deleted" if deleted else f"no cluster at {ctx.ledgers_root}",
    )
    return 0
