"""``listfilesondisc [--txn] [--log] [--idx]``: the journal files, entry logs and index
directories of this host's bookie, with their sizes (BookKeeper's command of the same name;
no option lists all three). The bookie's dirs come from ``--conf`` or the dir flags."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bookie.storage.entry_logger import parse_log_name
from bookie.storage.journal_format import parse_file_name
from bookie.storage.ledger_directory import CURRENT, LEDGERS_INDEX, LOCATIONS_INDEX
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


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _files(dirs: tuple[Path, ...], wanted: Any) -> list[dict[str, Any]]:
    found = [
        p for d in dirs if (d / CURRENT).is_dir()
        for p in sorted((d / CURRENT).iterdir()) if wanted(p)
    ]  # fmt: skip
    return [{"path": str(p), "size": _size(p)} for p in found]


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    every = not (args.txn or args.log or args.idx)
    listing: dict[str, list[dict[str, Any]]] = {}
    if every or args.txn:
        listing["journal_files"] = _files(dirs.journal_dirs, lambda p: parse_file_name(p.name) is not None)
    if every or args.log:
        listing["entry_logs"] = _files(dirs.ledger_dirs, lambda p: parse_log_name(p.name) is not None)
    if every or args.idx:
        listing["index_dirs"] = _files(dirs.ledger_dirs, lambda p: p.name in (LEDGERS_INDEX, LOCATIONS_INDEX))
    titles = {"journal_files": "Journal files", "entry_logs": "Entry logs", "index_dirs": "Index directories"}
    lines = []
    for key, files in listing.items():
        lines.append(f"{titles[key]} ({len(files)}):")
        lines += [f"  {f['path']}  {f['size']} bytes" for f in files]
    ctx.emit(listing, "\n".join(lines))
    return 0
