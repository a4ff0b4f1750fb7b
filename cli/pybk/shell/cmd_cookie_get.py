"""``cookie_get ID``: a bookie's cookie as ZooKeeper holds it (BookKeeper's command of the same
name): the directories and cluster the bookie was created with. Exit 1 when it has none."""

from __future__ import annotations

import argparse
from typing import Any

from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, bookie_id


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("cookie_get", help="print a bookie's cookie")
    parser.add_argument("bookie_id", type=bookie_id, metavar="ID", help="the bookie (host:port)")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    found = await meta.cookies.get(args.bookie_id)
    if found is None:
        ctx.error(f"bookie {args.bookie_id} has no cookie (no {meta.layout.cookie(args.bookie_id)})")
        return EXIT_FAILED
    cookie, version = found
    ctx.emit(
        {
            "bookie_id": args.bookie_id,
            "version": version,
            "bookie_host": cookie.bookie_host,
            "journal_dirs": list(cookie.journal_dirs),
            "ledger_dirs": list(cookie.ledger_dirs),
            "instance_id": cookie.instance_id,
        },
        f"cookie of bookie {args.bookie_id} (znode version {version}):\n"
        + cookie.to_bytes().decode().rstrip(),
    )
    return 0
