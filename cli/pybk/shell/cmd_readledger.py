"""``readledger -l ID [-fe N] [-le N] [-r]``: read a range of entries (digests verified).

The password comes from the ledger's metadata (an administrator's read, as BookKeeper's shell
does). Without ``-r`` an open ledger is read up to its last add confirmed, as the bookies report
it; ``-r`` first recovers it (fences the writer, closes the ledger at its last replicated entry).
With ``--json`` the output is one JSON object streamed entry by entry, so a large ledger is never
held in memory.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pybk.arg_types import non_negative
from pybk.progress import Progress
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import entry_dict, entry_line, shell_client, usage_error


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("readledger", help="read entries of a ledger")
    parser.add_argument("-l", "--ledgerid", dest="ledger_id", type=non_negative, required=True,
                        metavar="ID", help="ledger id")
    parser.add_argument("-fe", "--firstentryid", dest="first", type=non_negative, default=0, metavar="N",
                        help="first entry id (default 0)")
    parser.add_argument("-le", "--lastentryid", dest="last", type=int, default=-1, metavar="N",
                        help="last entry id (default -1: the last add confirmed)")
    parser.add_argument("-r", "--force-recovery", dest="recovery", action="store_true",
                        help="recover (fence and close) an open ledger before reading")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    if args.last >= 0 and args.last < args.first:
        return usage_error(ctx, f"readledger: -le {args.last} is before -fe {args.first}")
    async with await shell_client(ctx) as bk:
        metadata = await bk.ledger_metadata(args.ledger_id)
        handle = await bk.open_ledger(args.ledger_id, password=metadata.password, recovery=args.recovery)
        try:
            lac = handle.last_add_confirmed if handle.is_closed else await handle.read_last_add_confirmed()
            last = lac if args.last < 0 else min(args.last, lac)
            header = {"ledger_id": args.ledger_id, "last_add_confirmed": lac, "closed": handle.is_closed}
            if ctx.as_json:
                # One JSON object, written incrementally: {"ledger_id":..,...,"entries":[...]}
                head = json.dumps(header, sort_keys=True)[:-1]
                ctx.out.write(head + ', "entries": [')
                separator = ""
                async for entry in handle.read(args.first, last):
                    ctx.out.write(separator + json.dumps(entry_dict(entry), sort_keys=True))
                    separator = ", "
                ctx.out.write("]}\n")
            else:
                state = "closed" if handle.is_closed else "open"
                print(f"ledger {args.ledger_id} ({state}, last add confirmed {lac})", file=ctx.out)
                count = 0
                # A bar only while the entries go elsewhere than the terminal (a file, a pipe):
                # on the terminal they scroll by and are their own progress.
                with Progress(last - args.first + 1, quiet=ctx.out.isatty(), stream=ctx.err) as progress:
                    async for entry in handle.read(args.first, last):
                        print(entry_line(entry), file=ctx.out)
                        count += 1
                        if count % 256 == 0:
                            progress.update(count)
                print(f"{count} entries read", file=ctx.out)
        finally:
            await handle.close()
    return 0
