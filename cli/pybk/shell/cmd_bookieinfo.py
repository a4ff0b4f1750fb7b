"""``bookieinfo``: each registered bookie's free and total disk space, asked of the bookie itself
(GetBookieInfo), and the cluster's sums (BookKeeper's command of the same name). A bookie that
does not answer is listed with its error, and the exit code is 1."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient.admin_views import bookie_disk_space
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, shell_client


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bookieinfo", help="print each bookie's free and total disk space"
    )
    parser.set_defaults(run=run)


def _size(n: int) -> str:
    """For people, next to the byte count."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, i = float(n), 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    return f"{value:.1f} {units[i]}"


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    async with await shell_client(ctx) as bk:
        bookies = await bookie_disk_space(bk)
    answered = [b for b in bookies if "error" not in b]
    free = sum(b["free_bytes"] for b in answered)
    total = sum(b["total_bytes"] for b in answered)
    lines = [
        f"{b['bookie_id']}:\tFree: {b['free_bytes']} ({_size(b['free_bytes'])})\t"
        f"Total: {b['total_bytes']} ({_size(b['total_bytes'])})" if "error" not in b
        else f"{b['bookie_id']}:\tno answer: {b['error']}"
        for b in bookies
    ]
    lines += [f"Total free disk space in the cluster:\t{free} ({_size(free)})",
              f"Total disk capacity in the cluster:\t{total} ({_size(total)})"]
    ctx.emit({"bookies": bookies, "free_bytes": free, "total_bytes": total}, "\n".join(lines))
    return 0 if len(answered) == len(bookies) else EXIT_FAILED
