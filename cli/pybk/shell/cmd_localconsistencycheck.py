"""``localconsistencycheck [--conf F | dir flags]``: check this host's bookie's ledger directories
against their indexes (BookKeeper's command of the same name, plus the other direction): every
indexed entry is read back and its record checked, and every entry log is walked for entries of
live ledgers that the index lacks. Exit 1 when anything is wrong, when a directory is not a
bookie's (no ``current/``: a wrong ``--conf``?) or while the bookie runs (stop it first: its
flushes and garbage collection would change the files under the check)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from bookie.storage.offline import ConsistencyReport, DirectoryInUseError, check_directory
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "localconsistencycheck", help="check this host's bookie's entry logs against its indexes"
    )
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


def _lines(report: ConsistencyReport) -> list[str]:
    if not report.checked:
        return [f"{report.directory}: no current/ directory, nothing to check (not this bookie's?)"]
    head = (f"{report.directory}: {report.ledgers} ledger(s), {report.entries_checked} indexed"
            f" entries read back: {'OK' if report.ok else 'PROBLEMS'}")
    lines = [head]
    lines += [f"  index: {problem}" for problem in report.index_problems]
    if report.bad_entries or report.unindexed_entries or report.unreadable_logs:
        lines.append(f"  {report.bad_entries} bad entries, {report.unindexed_entries} entries not"
                     f" in the index, {report.unreadable_logs} unreadable entry logs")
    lines += [f"  {problem}" for problem in report.problems]
    more = report.bad_entries + report.unindexed_entries + report.unreadable_logs - len(report.problems)
    if more > 0:
        lines.append(f"  ... and {more} more")
    if report.unindexed_entries:
        lines.append("  the entry logs hold entries the index lacks: with the bookie stopped, run"
                     " `pybk shell rebuild-db-ledger-locations-index` (after a crash, a restart"
                     " replaying the journal may index them first)")
    return lines


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    try:
        reports = [await asyncio.to_thread(check_directory, d) for d in dirs.ledger_dirs]
    except DirectoryInUseError as exc:
        ctx.error(f"localconsistencycheck: {exc}: stop the bookie first")
        return EXIT_FAILED
    ok = all(r.ok for r in reports)
    ctx.emit(
        {"ok": ok, "directories": [dataclasses.asdict(r) for r in reports]},
        "\n".join([*(line for r in reports for line in _lines(r)),
                   "local consistency check " + ("passed" if ok else "FAILED")]),
    )
    return 0 if ok else EXIT_FAILED
