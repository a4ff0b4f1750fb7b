"""``bookieformat [--conf F] [dir flags] [-d [--bookieid ID]] [-f]``: wipe a stopped bookie's data
so that it can start again empty (BookKeeper's command of the same name).

Run it on the bookie's host with the bookie's own configuration: the directories and ZooKeeper
come from the same ``--conf`` file, ``BK_<key>`` variables and flags as ``pybk bookie`` (the
shell's ``--zk``, when given, wins). What goes is each directory's ``current/`` (journals, entry
logs, indexes, the local cookie) and the journal marks beside it. The bookie is known by the
cookie its directories hold, or by ``--bookieid``.

- Refused (exit 1) while a bookie runs on these directories (it holds their index locks; the
  command then holds them itself until it is done, so none starts meanwhile) or while the bookie
  is registered in ZooKeeper.
- ``-d/--deletecookie`` also deletes its cookie in ZooKeeper, so the id starts afresh (after a
  disk was replaced, say). Refused while ledgers still name the bookie: run ``recover`` first
  (see :mod:`pybk.shell.cookie_guard`). The cookie goes first, then the journal marks, then the
  files, so a run cut short is finished by running it again.
- A ``current/`` that is a symbolic link, or holds files but none of a bookie's, is left alone
  (exit 1); ``--bookieid`` naming another bookie than the directories' cookie is a usage error.
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
from bookie.storage.fileio import fsync_dir
from bookie.storage.last_mark import mark_files
from bookie.storage.ledger_directory import (
    CURRENT,
    LEDGERS_INDEX,
    LOCATIONS_INDEX,
    DirectoryInUseError,
    index_locks,
)
from pybk.shell.context import ShellContext
from pybk.shell.cookie_guard import ledgers_naming, running_reason, still_named
from pybk.shell.ledger_view import EXIT_FAILED, bookie_id, refused, usage_error
from pybk.shell.local_dirs import BookieDirs, add_bookie_dir_options, bookie_dirs

# What a bookie keeps in current/: a non-empty one holding none of these is not a bookie's.
BOOKIE_FILES = ("VERSION", "BOOKIE_STATUS", f"{LEDGERS_INDEX}/CURRENT", f"{LOCATIONS_INDEX}/CURRENT")
BOOKIE_SUFFIXES = (".log", ".txn")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bookieformat", help="wipe a stopped bookie's directories (and with -d its cookie)"
    )
    add_bookie_dir_options(parser)
    parser.add_argument("-d", "--deletecookie", action="store_true",
                        help="also delete the bookie's cookie in ZooKeeper")
    parser.add_argument("--bookieid", type=bookie_id, metavar="ID",
                        help="the bookie, when its directories no longer hold its cookie")
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


def _not_a_bookies(dirs: list[Path]) -> str | None:
    for directory in dirs:
        current = directory / CURRENT
        if current.is_symlink():
            return f"{current} is a symbolic link: wipe what it points at by hand"
        if not current.is_dir() or not any(current.iterdir()):
            continue  # nothing to lose
        if not any((current / name).exists() for name in BOOKIE_FILES) and not any(
            p.suffix in BOOKIE_SUFFIXES for p in current.iterdir()
        ):
            return f"{current} holds no bookie file: is this the bookie's configuration?"
    return None


async def _cluster_exists(meta: MetadataClient) -> bool:
    try:
        await read_instance_id(meta.zk, meta.layout)
    except ClusterNotInitializedError:
        return False
    return True


def _wipe(dirs: BookieDirs) -> list[str]:
    """The marks first: a mark left behind, with current/ gone, would make the next start skip
    its new journal; a current/ left behind is refused at start by its cookie, or found again."""
    wiped = []
    for directory in dirs.ledger_dirs:
        marks = mark_files(directory)
        for mark in marks:
            mark.unlink()
            wiped.append(str(mark))
        if marks:
            fsync_dir(directory)
    for directory in dirs.all:
        current = directory / CURRENT
        if current.exists():
            shutil.rmtree(current)
            wiped.append(str(current))
    return wiped


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    try:
        with index_locks(dirs.ledger_dirs):  # held to the end: no bookie starts on them meanwhile
            return await _format(ctx, args, dirs)
    except DirectoryInUseError as exc:
        ctx.error(f"bookieformat: {exc}: stop it first")
        return EXIT_FAILED


async def _format(ctx: ShellContext, args: argparse.Namespace, dirs: BookieDirs) -> int:
    if (reason := _not_a_bookies(dirs.all)) is not None:
        ctx.error(f"bookieformat: {reason}")
        return EXIT_FAILED
    owners = _owners(ctx, dirs.all)
    if args.bookieid is not None and owners and owners != [args.bookieid]:
        return usage_error(ctx, f"bookieformat: the directories hold the cookie of {', '.join(owners)},"
                                f" not of --bookieid {args.bookieid}")
    owners = owners or ([args.bookieid] if args.bookieid else [])
    if args.deletecookie and not owners:
        return usage_error(ctx, "bookieformat: the directories hold no cookie, so which bookie's to"
                                " delete is unknown: name it with --bookieid")
    if not ctx.zk_given and dirs.zk_servers is not None:
        ctx.zk_hosts = dirs.zk_servers  # the bookie's own cluster
    cluster = False
    if dirs.zk_servers is not None or ctx.zk_given:
        # A bookie of a cluster whose metadata is gone (nuked) has nothing registered to check.
        cluster = await _cluster_exists(await ctx.metadata(require_cluster=False, watch_bookies=False))
    elif args.deletecookie:
        ctx.error("bookieformat: the bookie runs without ZooKeeper (zkServers=none): it has no cookie")
        return EXIT_FAILED
    for bookie in owners if cluster else ():
        if (reason := await running_reason(ctx, bookie)) is not None:
            ctx.error(f"bookieformat: {reason}")
            return EXIT_FAILED
        if args.deletecookie and (ledgers := await ledgers_naming(ctx, bookie)):
            ctx.error(f"bookieformat: {still_named(bookie, ledgers)}")
            return EXIT_FAILED
    what = "delete the cookie of " + ", ".join(owners) + " and " if args.deletecookie else ""
    if not args.force and (exit_code := await refused(
        ctx, f"Format bookie {', '.join(owners) or '(no cookie found)'}: {what}delete everything in"
             f" {', '.join(str(d / CURRENT) for d in dirs.all)}?",
        "bookieformat: no confirmation on stdin; pass -f to go ahead",
        ({"formatted": False}, "nothing done"),
    )) is not None:
        return exit_code
    deleted = []
    if args.deletecookie and cluster:
        meta = await ctx.metadata(require_cluster=False, watch_bookies=False)
        deleted = [bookie for bookie in owners if await meta.cookies.delete(bookie)]
    try:
        wiped = _wipe(dirs)
    except OSError as exc:
        ctx.error(f"bookieformat: stopped part way ({exc}); run it again to finish")
        return EXIT_FAILED
    lines = [f"deleted {path}" for path in wiped] or ["nothing to delete: no current/ directory"]
    lines += [f"deleted the cookie of bookie {bookie}" for bookie in deleted]
    ctx.emit({"formatted": True, "bookie_ids": owners, "wiped": wiped, "cookies_deleted": deleted},
             "\n".join(lines))
    return 0
