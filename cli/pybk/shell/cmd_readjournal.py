"""``readjournal ID|FILE [-m]``: the records of one journal file of this host's bookie
(BookKeeper's command of the same name): entries, master keys, fences and explicit LACs, up to
the first record that is not valid, and why reading stopped there (``clean``: the zero-filled
end; ``torn``: cut short by a crash; ``corrupt``). The file is given by path, or by its hex id
in the bookie's journal dirs (``--conf`` or the dir flags)."""

from __future__ import annotations

import argparse
from typing import Any

from bookie.storage.file_dump import JournalDump, find_file
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import usage_error
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs
from pybk.shell.record_view import record_json, record_lines


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "readjournal", help="print the records of one of this host's bookie's journal files"
    )
    parser.add_argument("journal", metavar="ID|FILE", help="journal file id (hex) or path")
    parser.add_argument("-m", "--msg", action="store_true", help="print each record's data too")
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    try:
        dump = JournalDump(find_file(list(bookie_dirs(args).journal_dirs), args.journal, ".txn"))
    except (ValueError, OSError) as exc:
        return usage_error(ctx, f"readjournal: {exc}")
    if ctx.as_json:
        records = [record_json(r, args.msg) for r in dump.records()]
        ctx.emit({"file": str(dump.path), "journal_id": dump.journal_id, "records": records,
                  "end_offset": dump.end_offset, "end": dump.end_reason}, "")
        return 0
    print(f"Journal {dump.journal_id:x} ({dump.path})", file=ctx.out)
    for record in dump.records():
        print("\n".join(record_lines(record, args.msg)), file=ctx.out)
    print(f"end at offset {dump.end_offset}: {dump.end_reason}", file=ctx.out)
    return 0
