"""``bookieinfo``: each registered bookie's free and total disk space, asked of the bookie itself
(GetBookieInfo), and the cluster's sums (BookKeeper's command of the same name). A bookie that
does not answer is listed with its error, and the exit code is 1."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bkproto.errors import BKError
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, shell_client

INFO_TIMEOUT_S = 10.0


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
        watcher = bk.ctx.bookie_watcher
        bookie_ids = sorted({*watcher.writable_bookies(), *watcher.readonly_bookies()})

        async def ask(bookie_id: str) -> dict[str, Any]:
            try:
                total, free = await bk.ctx.bookie(bookie_id).get_bookie_info(timeout=INFO_TIMEOUT_S)
            except BKError as exc:
                return {"bookie_id": bookie_id, "error": f"{type(exc).__name__}: {exc}"}
            return {"bookie_id": bookie_id, "free_bytes": free, "total_bytes": total}

        bookies = await asyncio.gather(*(ask(b) for b in bookie_ids))
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
