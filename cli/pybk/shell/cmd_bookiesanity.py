"""``bookiesanity [-b BOOKIE] [-e 10] [-t 30]``: write and read back a few entries on one bookie.

Like BookKeeper's (which uses ``LocalBookieEnsemblePlacementPolicy``), each checked bookie gets its
own ledger with E = Qw = Qa = 1 placed on it alone, written, closed, read back, compared, deleted.
Without ``-b`` every writable bookie on this machine is checked. Exit 0 only if all passed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

from bkclient import ClientConfig
from bkclient.admin_views import bookie_sanity
from pybk.arg_types import positive
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, shell_client


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bookiesanity", help="write/read a few entries on a bookie (E=Qw=Qa=1)"
    )
    parser.add_argument("-b", "--bookie", default=None, metavar="BOOKIE_ID",
                        help="bookie to check (default: every writable bookie on this machine)")
    parser.add_argument("-e", "--entries", type=positive, default=10, help="entries to write (default 10)")
    parser.add_argument("-t", "--timeout", type=positive, default=30,
                        help="seconds allowed per bookie (default 30)")
    parser.set_defaults(run=run)


def _local_addresses() -> set[str]:
    names = {"localhost", "::1", socket.gethostname(), socket.getfqdn()}
    addresses = set(names)
    for name in names:
        try:
            addresses.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
        except OSError:
            continue
    return addresses


def _is_local(host: str, local: set[str]) -> bool:
    return host.startswith("127.") or host in local


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata()
    writable = meta.bookie_watcher.writable_bookies()
    if args.bookie is not None:
        if args.bookie not in writable:
            ctx.error(f"bookiesanity: {args.bookie} is not a registered writable bookie "
                      f"(writable: {', '.join(sorted(writable)) or 'none'})")
            return EXIT_FAILED
        targets = [args.bookie]
    else:
        local = await asyncio.to_thread(_local_addresses)
        targets = sorted(b for b, info in writable.items() if _is_local(info.grpc_host, local))
        if not targets:
            ctx.error("bookiesanity: no writable bookie runs on this machine; name one with -b")
            return EXIT_FAILED
    async with await shell_client(ctx, ClientConfig()) as bk:
        results = [await bookie_sanity(bk, bookie_id, args.entries, args.timeout) for bookie_id in targets]
    ok = all(r["ok"] for r in results)
    lines = [
        f"{r['bookie_id']}: " + ("OK" if r["ok"] else f"FAILED ({r['error']})")
        + f", {args.entries} entries in {r['elapsed_s']} s"
        for r in results
    ]
    lines.append("Bookie sanity test succeeded" if ok else "Bookie sanity test FAILED")
    ctx.emit({"ok": ok, "entries": args.entries, "bookies": results}, "\n".join(lines))
    return 0 if ok else EXIT_FAILED

