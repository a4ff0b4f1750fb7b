"""``cookie_delete ID [-f]``: delete a stopped bookie's cookie (BookKeeper's command of the same
name), so that the id can start afresh on new, empty directories.

Refused (exit 1) while the bookie is registered, and, without ``-f``, while ledgers still name
it (see :mod:`pybk.shell.cookie_guard`). ``decommissionbookie`` does the whole job (re-replicate,
then delete the cookie); this is the single step."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta import InvalidCookieError
from pybk.shell.context import ShellContext
from pybk.shell.cookie_guard import ledgers_naming, running_reason, still_named
from pybk.shell.ledger_view import EXIT_FAILED, bookie_id


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "cookie_delete", help="delete a stopped bookie's cookie (refused while ledgers name it, unless -f)"
    )
    parser.add_argument("bookie_id", type=bookie_id, metavar="ID", help="the bookie (host:port)")
    parser.add_argument(
        "-f", "--force", action="store_true", help="delete even though ledgers still have replicas on it"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    bookie = args.bookie_id
    meta = await ctx.metadata()
    version = -1  # any: an unreadable cookie
    try:
        found = await meta.cookies.get(bookie)
    except InvalidCookieError as exc:  # deleting it is one way out, if insisted on
        if not args.force:
            ctx.error(f"cookie_delete: {exc}; pass -f to delete it all the same")
            return EXIT_FAILED
    else:
        if found is None:
            ctx.error(f"bookie {bookie} has no cookie (no {meta.layout.cookie(bookie)})")
            return EXIT_FAILED
        version = found[1]
    if (reason := await running_reason(ctx, bookie)) is not None:
        ctx.error(f"cookie_delete: {reason}")
        return EXIT_FAILED
    ledgers = await ledgers_naming(ctx, bookie)
    if ledgers and not args.force:
        ctx.error(f"cookie_delete: {still_named(bookie, ledgers)}; or pass -f")
        return EXIT_FAILED
    if ledgers:
        ctx.warn(still_named(bookie, ledgers))
    if not await meta.cookies.delete(bookie, version=version):
        ctx.error(f"cookie_delete: the cookie of bookie {bookie} was deleted meanwhile")
        return EXIT_FAILED
    ctx.emit({"bookie_id": bookie, "deleted": True, "ledgers_naming_it": len(ledgers)},
             f"cookie of bookie {bookie} deleted")
    return 0
