"""``listfilesondisc [--txn] [--log] [--idx]``: the journal files, entry logs and index
directories of this host's bookie, with their sizes (BookKeeper's command of the same name;
no option lists all three). The bookie's dirs come from ``--conf`` or the dir flags."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bookie.storage.file_listing import disk_files
from pybk.shell.context import ShellContext
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "listfilesondisc", help="list this host's bookie's journal files, entry logs and indexes"
    )
    parser.add_argument("--txn", action="store_true", help="journal files")
    parser.add_argument("--log", action="store_true", help="entry logs")
    parser.add_argument("--idx", action="store_true", help="index directories (RocksDB)")
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    every = not (args.txn or args.log or args.idx)
    wanted = [kind for kind, flag in (("journal_files", args.txn), ("entry_logs", args.log),
                                      ("index_dirs", args.idx)) if every or flag]
    listing = await asyncio.to_thread(disk_files, dirs.journal_dirs, dirs.ledger_dirs, wanted)
    titles = {"journal_files": "Journal files", "entry_logs": "Entry logs", "index_dirs": "Index directories"}
    lines = []
    for key, files in listing.items():
        lines.append(f"{titles[key]} ({len(files)}):")
        lines += [f"  {f['path']}  {f['size']} bytes" for f in files]
    ctx.emit(listing, "\n".join(lines))
    return 0
