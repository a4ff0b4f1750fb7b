"""``readlogmetadata ID|FILE``: how many bytes of each ledger one entry log of this host's bookie
holds (BookKeeper's command of the same name): the map the log was closed with, or, for a log
being written or left by a crash, a scan of its records. Garbage collection works from these."""

from __future__ import annotations

import argparse
from typing import Any

from bookie.storage.entry_logger import CorruptEntryError
from bookie.storage.file_dump import EntryLogDump, find_file
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, usage_error
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "readlogmetadata", help="print the ledgers one of this host's bookie's entry logs holds"
    )
    parser.add_argument("entry_log", metavar="ID|FILE", help="entry log id (hex) or path")
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    try:
        dump = EntryLogDump(find_file(list(bookie_dirs(args).ledger_dirs), args.entry_log, ".log"))
    except (ValueError, OSError) as exc:
        return usage_error(ctx, f"readlogmetadata: {exc}")
    try:
        usage, persisted = dump.ledger_map()
    except CorruptEntryError as exc:
        ctx.error(f"readlogmetadata: {exc}")
        return EXIT_FAILED
    finally:
        dump.close()
    source = "its ledger map" if persisted else "a scan of its records (it has no ledger map)"
    lines = [f"entry log {dump.log_id:x} ({dump.path}), from {source}: {len(usage)} ledger(s),"
             f" {sum(usage.values())} bytes"]
    lines += [f"  ledger {ledger_id}: {size} bytes" for ledger_id, size in sorted(usage.items())]
    ctx.emit({"file": str(dump.path), "log_id": dump.log_id, "from_ledger_map": persisted,
              "ledgers": {str(k): v for k, v in sorted(usage.items())}}, "\n".join(lines))
    return 0
