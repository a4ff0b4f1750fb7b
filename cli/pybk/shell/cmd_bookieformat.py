"""``bookieformat [--conf F] [--data-dir D | --journal-dirs J --ledger-dirs L] [-d] [-f]``: wipe a
stopped bookie's data so that it can start again empty (BookKeeper's command of the same name).

Run it on the bookie's host with the bookie's own configuration: the directories come from the
same ``--conf`` file, ``BK_<key>`` variables and flags as ``pybk bookie``. What goes is each
directory's ``current/`` (journals, entry logs, indexes and the local cookie), as in BookKeeper.
The bookie is known by the cookie its directories hold.

- Refused (exit 1) while that bookie is registered: its files are in use.
- ``-d/--deletecookie`` also deletes its cookie in ZooKeeper, so the id starts afresh (after a
  disk was replaced, say). Refused while ledgers still name the bookie: run ``recover`` first
  (see :mod:`pybk.shell.cookie_guard`). The cookie goes before the files, so a run cut short is
  finished by running it again.
- Asks first unless ``-f``; without an answer on stdin it exits 2 and deletes nothing.

Without ``-d`` the bookie will not start on the wiped directories while its cookie is in
ZooKeeper: that is the replaced-disk guard, as intended until its ledgers are re-replicated.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from bkmeta import (
    ClusterNotInitializedError,
    InvalidCookieError,
    MetadataClient,
    read_instance_id,
    read_local_cookies,
)
from pybk.shell.context import ShellContext
from pybk.shell.cookie_guard import ledgers_naming, running_reason, still_named
from pybk.shell.ledger_view import EXIT_FAILED, refused
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs

CURRENT = "current"


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bookieformat", help="wipe a stopped bookie's directories (and with -d its cookie)"
    )
    add_bookie_dir_options(parser)
    parser.add_argument("-d", "--deletecookie", action="store_true",
                        help="also delete the bookie's cookie in ZooKeeper")
    parser.add_argument("-f", "--force", action="store_true", help="format without asking")
    parser.set_defaults(run=run)


def _owners(ctx: ShellContext, dirs: list[Path]) -> list[str]:
    """The bookie ids the directories' cookies name. An unreadable cookie is what formatting
    cures, so it is only reported."""
    owners: set[str] = set()
    for directory in dirs:
        try:
            owners.update(cookie.bookie_host for cookie in read_local_cookies([directory]).values())
        except InvalidCookieError as exc:
            ctx.warn(str(exc))
    return sorted(owners)


async def _cluster_exists(meta: MetadataClient) -> bool:
    try:
        await read_instance_id(meta.zk, meta.layout)
    except ClusterNotInitializedError:
        return False
    return True


def _wipe(dirs: list[Path]) -> list[str]:
    wiped = []
    for directory in dirs:
        current = directory / CURRENT
        if current.exists():
            shutil.rmtree(current)
            wiped.append(str(current))
    return wiped


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args).all
    owners = _owners(ctx, dirs)
    # A bookie of a cluster whose metadata is gone (nuked) has nothing registered to check.
    meta = await ctx.metadata(require_cluster=False, watch_bookies=False)
    cluster = await _cluster_exists(meta)
    for bookie in owners if cluster else ():
        if (reason := await running_reason(ctx, bookie)) is not None:
            ctx.error(f"bookieformat: {reason}")
            return EXIT_FAILED
        if args.deletecookie and (ledgers := await ledgers_naming(ctx, bookie)):
            ctx.error(f"bookieformat: {still_named(bookie, ledgers)}")
            return EXIT_FAILED
    what = "delete the cookie of " + ", ".join(owners) + " and " if args.deletecookie and owners else ""
    if not args.force and (exit_code := await refused(
        ctx, f"Format bookie {', '.join(owners) or '(no cookie found)'}: {what}delete everything in"
             f" {', '.join(str(d / CURRENT) for d in dirs)}?",
        "bookieformat: no confirmation on stdin; pass -f to go ahead",
        ({"formatted": False}, "nothing done"),
    )) is not None:
        return exit_code
    deleted = []
    if args.deletecookie and cluster:
        deleted = [bookie for bookie in owners if await meta.cookies.delete(bookie)]
    wiped = _wipe(dirs)
    lines = [f"deleted {path}" for path in wiped] or ["nothing to delete: no current/ directory"]
    lines += [f"deleted the cookie of bookie {bookie}" for bookie in deleted]
    ctx.emit({"formatted": True, "bookie_ids": owners, "wiped": wiped, "cookies_deleted": deleted},
             "\n".join(lines))
    return 0
