"""``listlogs [-l NAME]``: the named logs (written by ``format("bookkeeper")`` and
:mod:`bkclient.named_log`), each with its commits, segments, entries and bytes, and the ledgers
still pending; with ``-l``, one log's segments in order."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta.named_log import LOGS_ROOT, LogStore
from pybk.shell.context import ShellContext


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("listlogs", help="list the named logs")
    parser.add_argument("-l", "--log", metavar="NAME", help="show this log's segments")
    parser.add_argument("--logs-root", default=LOGS_ROOT, help=f"logs root znode (default {LOGS_ROOT})")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    store = LogStore(meta.zk, args.logs_root)
    names = [args.log] if args.log else await store.names()
    logs: list[dict[str, Any]] = []
    lines: list[str] = []
    for name in names:
        commits = await store.commits(name)
        segments = [seg for commit in commits for seg in commit.segments]
        pending = sorted(await store.pending(name))
        entry: dict[str, Any] = {
            "log": name, "commits": len(commits), "segments": len(segments),
            "entries": sum(s.entries for s in segments), "bytes": sum(s.length for s in segments),
            "pending_ledgers": pending,
        }
        lines.append(f"{name}: {len(commits)} commits, {len(segments)} segments, {entry['entries']} "
                     f"entries, {entry['bytes']} bytes, {len(pending)} ledgers pending")
        if args.log:
            entry["segment_list"] = [
                {"ledger_id": s.ledger_id, "entries": s.entries, "bytes": s.length,
                 "write_id": s.write_id, "task": s.task} for s in segments
            ]
            lines += [f"  ledger {s.ledger_id}: {s.entries} entries, {s.length} bytes "
                      f"(write {s.write_id}, task {s.task})" for s in segments]
        logs.append(entry)
    ctx.emit({"logs": logs}, "\n".join(lines) if lines else f"no logs under {args.logs_root}")
    return 0
