"""``loggc -l NAME [--min-age-s S] [--dry-run] [-f]``: delete a named log's garbage, the ledgers
no commit will name (see :mod:`bkmeta.log_gc`): pending ones whose write neither committed nor
aborted, and untracked ones tagged with the log. Only those older than ``--min-age-s`` (6 hours by
default), since a write in progress looks the same. The markers of writes aborted at least that
long ago go too, once none of their ledgers is pending. Asks first unless ``-f``."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta.log_gc import find_garbage, find_stale_markers, remove_garbage, remove_stale_markers
from bkmeta.named_log import LOGS_ROOT, LogStore
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import refused

DEFAULT_MIN_AGE_S = 6 * 3600


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "loggc", help="delete a named log's orphaned ledgers"
    )
    parser.add_argument("-l", "--log", metavar="NAME", required=True, help="the log")
    parser.add_argument("--min-age-s", type=non_negative, default=DEFAULT_MIN_AGE_S, metavar="S",
                        help=f"only ledgers at least this old (default {DEFAULT_MIN_AGE_S})")
    parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    parser.add_argument("-f", "--force", action="store_true", help="delete without asking")
    parser.add_argument("--logs-root", default=LOGS_ROOT, help=f"logs root znode (default {LOGS_ROOT})")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata(watch_bookies=False)
    store = LogStore(meta.zk, args.logs_root)
    garbage = await find_garbage(store, meta.ledger_manager, args.log, min_age_s=args.min_age_s)
    markers = await find_stale_markers(store, args.log, min_age_s=args.min_age_s)
    listing = [f"  ledger {g.ledger_id}: {g.kind}, write {g.write_id}, {g.age_s:.0f} s old" for g in garbage]
    listing += [f"  marker of aborted write {m.write_id}, {m.age_s:.0f} s old" for m in markers]
    found = {"ledger_id": [g.ledger_id for g in garbage], "kind": [g.kind for g in garbage],
             "aborted_write": [m.write_id for m in markers]}
    if not (garbage or markers) or args.dry_run:
        ctx.emit({"log": args.log, "found": found, "deleted": [], "markers_deleted": []},
                 "\n".join([f"{args.log}: {len(garbage)} orphaned ledgers, {len(markers)} old abort markers",
                            *listing]))
        return 0
    if not args.force and (exit_code := await refused(
        ctx, "\n".join([*listing, f"Delete these {len(garbage)} ledgers and {len(markers)} abort markers "
                                f"of log {args.log}?"]),
        "loggc: no confirmation on stdin; pass -f to delete without asking",
        ({"log": args.log, "found": found, "deleted": [], "markers_deleted": []}, "nothing deleted"),
    )) is not None:
        return exit_code
    removed = await remove_garbage(store, meta.ledger_manager, args.log, garbage)
    forgotten = await remove_stale_markers(store, args.log, markers)
    ctx.emit({"log": args.log, "found": found, "deleted": [g.ledger_id for g in removed],
              "markers_deleted": [m.write_id for m in forgotten]},
             f"{args.log}: deleted {len(removed)} of {len(garbage)} orphaned ledgers and "
             f"{len(forgotten)} of {len(markers)} old abort markers")
    return 0
