"""``listbookies [-rw | -ro | -a]``: the registered bookies with their endpoints and rack."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta import BookieServiceInfo
from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("listbookies", help="list registered bookies")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-rw", "--readwrite", dest="which", action="store_const", const="rw",
                       help="writable bookies only")
    group.add_argument("-ro", "--readonly", dest="which", action="store_const", const="ro",
                       help="read-only bookies only")
    group.add_argument("-a", "--all", dest="which", action="store_const", const="all",
                       help="writable and read-only bookies (default)")
    parser.set_defaults(run=run, which="all")


def _describe(info: BookieServiceInfo) -> dict[str, Any]:
    http = f"{info.http_host}:{info.http_port}" if info.http_host and info.http_port else None
    return {
        "bookie_id": info.bookie_id,
        "grpc": info.grpc_target,
        "add": info.add_target,
        # where a tailing reader's read stream goes: the add port when it serves one, else gRPC
        "reads": "add" if info.add_target is not None and info.add_port_reads else "grpc",
        "http": http,
        "rack": info.rack,
    }


def _line(b: dict[str, Any]) -> str:
    return (
        f"  {b['bookie_id']}  grpc={b['grpc']} add={b['add'] or '-'} reads={b['reads']}"
        f" http={b['http'] or '-'} rack={b['rack']}"
    )


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata()
    watcher = meta.bookie_watcher
    rw = [_describe(b) for _, b in sorted(watcher.writable_bookies().items())]
    ro = [_describe(b) for _, b in sorted(watcher.readonly_bookies().items())]
    data: dict[str, Any] = {}
    lines: list[str] = []
    if args.which in ("rw", "all"):
        data["readwrite"] = rw
        lines.append(f"ReadWrite Bookies ({len(rw)}):")
        lines += [_line(b) for b in rw]
    if args.which in ("ro", "all"):
        data["readonly"] = ro
        lines.append(f"Readonly Bookies ({len(ro)}):")
        lines += [_line(b) for b in ro]
    ctx.emit(data, "\n".join(lines))
    return 0
