"""``recover BOOKIE [BOOKIE ...] [--dry-run] [--skip-open-ledgers] [-l ID] [-f]``: copy the data
of lost bookies to others, ledger by ledger, so every entry is on its write quorum of live bookies
again (BookKeeper's ``bookkeeper shell recover``; see :mod:`bkclient.admin`).

An open ledger whose last segment names a lost bookie is fenced and closed first: a writer still
adding to it gets LedgerFencedError (``--skip-open-ledgers`` leaves open ledgers alone). So it
asks for confirmation unless ``-f`` or ``--dry-run``. Exit code 1 when a ledger could not be
re-replicated (say, no bookie to copy to, or an entry no replica holds); running it again retries
only what is left."""

from __future__ import annotations

import argparse
from typing import Any

from bkclient import BookKeeperAdmin, LedgerRecovery
from pybk.arg_types import non_negative
from pybk.progress import Progress
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import (
    EXIT_FAILED,
    add_rate_option,
    bookie_id,
    refused,
    shell_client,
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "recover", help="re-replicate the ledgers of lost bookies onto other bookies"
    )
    parser.add_argument("bookies", nargs="+", type=bookie_id, metavar="BOOKIE",
                        help="lost bookie id (host:port)")
    parser.add_argument("--dry-run", action="store_true", help="only print what would be done")
    parser.add_argument("--skip-open-ledgers", action="store_true",
                        help="leave open ledgers alone (never fence a writer)")
    parser.add_argument("-l", "--ledgerid", dest="ledger_id", type=non_negative, metavar="ID",
                        help="only this ledger")
    parser.add_argument("-f", "--force", action="store_true", help="recover without asking")
    add_rate_option(parser)
    parser.set_defaults(run=run)


def ledger_progress(ctx: ShellContext, what: str) -> Progress:
    """A bar of the ledgers looked at (shared with ``decommissionbookie``): each may copy many
    entries, so even a few are worth a bar."""
    return Progress(unit="ledgers", description=what, quiet=ctx.as_json, stream=ctx.err, min_total=2)


def ledger_lines(report: LedgerRecovery, dry_run: bool = False) -> list[str]:
    """One ledger's report as text lines (shared with ``decommissionbookie``)."""
    if report.skipped:
        return [f"ledger {report.ledger_id}: skipped, {report.skipped.value}"]
    head = f"ledger {report.ledger_id}"
    if report.fenced:
        head += " (open: would be fenced and closed first)" if dry_run else " (open: fenced and closed first)"
    lines = [head + ("" if dry_run else f": {report.entries_copied} entries copied")]
    for plan in report.fragments:
        if plan.last_entry_id is None:
            entries = f"entries {plan.first_entry_id}.. (to the end recovery finds)"
        elif plan.last_entry_id >= plan.first_entry_id:
            entries = f"entries {plan.first_entry_id}..{plan.last_entry_id}"
        else:
            entries = "no entries"
        new = ", ".join(plan.new) if plan.new is not None else "no bookie available"
        lines.append(f"  {entries}: [{', '.join(plan.old)}] -> [{new}]")
    if report.error:
        lines.append(f"  FAILED: {report.error}")
    return lines


def ledger_json(report: LedgerRecovery) -> dict[str, Any]:
    return {
        "ledger_id": report.ledger_id,
        "fenced": report.fenced,
        "skipped": report.skipped.value if report.skipped is not None else None,
        "entries_copied": report.entries_copied,
        "error": report.error,
        "fragments": [
            {"first_entry_id": p.first_entry_id, "last_entry_id": p.last_entry_id,
             "old": list(p.old), "new": list(p.new) if p.new is not None else None}
            for p in report.fragments
        ],
    }


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    lost = list(dict.fromkeys(args.bookies))
    if not (args.force or args.dry_run) and (exit_code := await refused(
        ctx, f"Re-replicate the ledgers of {', '.join(lost)}, fencing open ledgers that still write to them?",
        "recover: no confirmation on stdin; pass -f to recover without asking",
        ({"recovered": False}, "nothing done"),
    )) is not None:
        return exit_code
    async with await shell_client(ctx) as bk:
        meta = await ctx.metadata()
        still_there = sorted(set(lost) & set(meta.bookie_watcher.all_bookies()))
        if still_there:
            ctx.err.write(f"warning: still registered (stopped for good?): {', '.join(still_there)}\n")
        with ledger_progress(ctx, "recover") as progress:
            reports = await BookKeeperAdmin(bk, replication_rate_bytes=args.rate_bytes).recover_bookies(
                lost,
                ledger_ids=None if args.ledger_id is None else [args.ledger_id],
                dry_run=args.dry_run,
                skip_open_ledgers=args.skip_open_ledgers,
                progress=progress.update,
            )
    failed = [r.ledger_id for r in reports if not r.ok]
    copied = sum(r.entries_copied for r in reports)
    lines = [line for r in reports for line in ledger_lines(r, args.dry_run)]
    summary = (f"{len(reports)} ledger(s) named {', '.join(lost)}; {copied} entries copied; "
               f"{len(failed)} failed" + (f": {failed} (run again)" if failed else ""))
    ctx.emit(
        {"bookies": lost, "dry_run": args.dry_run, "ledgers": [ledger_json(r) for r in reports],
         "entries_copied": copied, "failed": failed},
        "\n".join([*lines, summary]),
    )
    return EXIT_FAILED if failed else 0
