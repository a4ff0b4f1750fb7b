"""``readlog ID|FILE [-m] [-l LEDGER] [-e ENTRY]``: the entries of one entry log of this host's
bookie (BookKeeper's command of the same name), each checked (ids, CRC32C); ``-l``/``-e`` keep
one ledger's or one entry's. The file is given by path, or by its hex id in the bookie's ledger
dirs. Exit 1 when a record is damaged or the log cannot be read to its end."""

from __future__ import annotations

import argparse
from typing import Any

from bookie.storage.entry_logger import CorruptEntryError
from bookie.storage.file_dump import EntryLogDump, find_file
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, usage_error
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs
from pybk.shell.record_view import record_json, record_lines


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "readlog", help="print the entries of one of this host's bookie's entry logs"
    )
    parser.add_argument("entry_log", metavar="ID|FILE", help="entry log id (hex) or path")
    parser.add_argument("-m", "--msg", action="store_true", help="print each entry's data too")
    parser.add_argument("-l", "--ledgerid", type=non_negative, help="only this ledger's entries")
    parser.add_argument("-e", "--entryid", type=non_negative, help="only this entry (with -l)")
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    if args.entryid is not None and args.ledgerid is None:
        return usage_error(ctx, "readlog: -e/--entryid needs -l/--ledgerid")
    try:
        dump = EntryLogDump(find_file(list(bookie_dirs(args).ledger_dirs), args.entry_log, ".log"))
    except (ValueError, OSError) as exc:
        return usage_error(ctx, f"readlog: {exc}")
    records, damaged, stopped = [], 0, None
    try:
        for record in dump.records(with_data=args.msg):
            if args.ledgerid is not None and record.ledger_id != args.ledgerid:
                continue
            if args.entryid is not None and record.entry_id != args.entryid:
                continue
            damaged += record.problem is not None
            records.append(record)
            if not ctx.as_json:
                print("\n".join(record_lines(record, args.msg)), file=ctx.out)
    except CorruptEntryError as exc:
        stopped = str(exc)
    finally:
        dump.close()
    if ctx.as_json:
        ctx.emit({"file": str(dump.path), "log_id": dump.log_id, "damaged": damaged, "stopped": stopped,
                  "records": [record_json(r, args.msg) for r in records]}, "")
    elif stopped:
        print(f"UNREADABLE from here: {stopped}", file=ctx.out)
    return EXIT_FAILED if damaged or stopped else 0
