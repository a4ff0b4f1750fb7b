"""``clusterinfo``: the cluster at a glance, with BookKeeper's field names: whether an autorecovery
leads and which, whether ledger re-replication is enabled, whether any ledger is under-replicated
(worked out from the metadata, see ``listunderreplicated``), and how many bookies the cluster
knows (by their cookies) and how many of them are writable, read-only and unavailable."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bkclient.admin_views import cluster_info
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import shell_client


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "clusterinfo", help="print the cluster's bookie counts and autorecovery state"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    async with await shell_client(ctx) as bk:
        info = await cluster_info(bk)
    ctx.emit(info, json.dumps(info, indent=2))
    return 0
