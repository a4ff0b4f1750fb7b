"""``logtruncate -l NAME [--keep-commits N] [--max-age-s S] [--dry-run] [-f]``: retention for a
named log (see :mod:`bkmeta.log_retention`). The commits older than ``--max-age-s`` or not among
the newest ``--keep-commits`` leave the log, oldest first and whole writes at a time, and their
ledgers are deleted. Asks first unless ``-f``."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta.log_retention import Retention, apply_retention
from bkmeta.named_log import LOGS_ROOT, LogCommit, LogStore
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import refused, usage_error


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "logtruncate", help="remove a named log's oldest commits and delete their ledgers"
    )
    parser.add_argument("-l", "--log", metavar="NAME", required=True, help="the log")
    parser.add_argument("--keep-commits", type=non_negative, metavar="N",
                        help="keep the newest N commits")
    parser.add_argument("--max-age-s", type=non_negative, metavar="S",
                        help="remove commits older than S seconds")
    parser.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    parser.add_argument("-f", "--force", action="store_true", help="remove without asking")
    parser.add_argument("--logs-root", default=LOGS_ROOT, help=f"logs root znode (default {LOGS_ROOT})")
    parser.set_defaults(run=run)


def _summary(commits: tuple[LogCommit, ...]) -> dict[str, Any]:
    segments = [seg for c in commits for seg in c.segments]
    return {
        "commits": [c.node for c in commits],
        "ledger_id": [seg.ledger_id for seg in segments],
        "entries": sum(seg.entries for seg in segments),
        "bytes": sum(seg.length for seg in segments),
    }


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    if args.keep_commits is None and args.max_age_s is None:
        return usage_error(ctx, "logtruncate: give --keep-commits, --max-age-s or both")
    retention = Retention(args.keep_commits, args.max_age_s)
    meta = await ctx.metadata(watch_bookies=False)
    store = LogStore(meta.zk, args.logs_root)
    plan = await apply_retention(store, meta.ledger_manager, args.log, retention, dry_run=True)
    found = _summary(plan.removed)
    text = (f"{args.log}: {len(plan.removed)} commits to remove ({found['entries']} entries, "
            f"{found['bytes']} bytes, {len(found['ledger_id'])} ledgers)")
    if not plan.removed or args.dry_run:
        ctx.emit({"log": args.log, "found": found, "removed": [], "deleted": [], "left": []}, text)
        return 0
    if not args.force and (exit_code := await refused(
        ctx, f"{text}. Remove them and delete their ledgers?",
        "logtruncate: no confirmation on stdin; pass -f to remove without asking",
        ({"log": args.log, "found": found, "removed": [], "deleted": [], "left": []}, "nothing removed"),
    )) is not None:
        return exit_code
    # Decided again from a fresh read (a commit the plan listed may be gone by now), but never
    # past the plan the operator saw: commits made or aged since then stay.
    done = await apply_retention(
        store, meta.ledger_manager, args.log, retention, up_to_seq=plan.removed[-1].seq
    )
    removed = _summary(done.removed)
    ctx.emit(
        {"log": args.log, "found": found, "removed": removed["commits"], "deleted": list(done.deleted),
         "left": list(done.left)},
        f"{args.log}: removed {len(done.removed)} commits ({removed['entries']} entries), deleted "
        f"{len(done.deleted)} ledgers" + (f"; {len(done.left)} left for loggc" if done.left else ""),
    )
    return 0
