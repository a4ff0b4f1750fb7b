"""``ledgermetadata -l ID``: one ledger's metadata as stored in ZooKeeper."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient.admin_views import metadata_dict
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import metadata_lines


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("ledgermetadata", help="print a ledger's metadata")
    parser.add_argument("-l", "--ledgerid", dest="ledger_id", type=non_negative, required=True,
                        metavar="ID", help="ledger id")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    versioned = await meta.ledger_manager.read_ledger_metadata(args.ledger_id)
    data = metadata_dict(args.ledger_id, versioned.value)
    data["version"] = versioned.version
    ctx.emit(data, "\n".join(metadata_lines(data)))
    return 0
