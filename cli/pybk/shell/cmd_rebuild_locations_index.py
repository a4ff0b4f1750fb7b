"""``rebuild-db-ledger-locations-index [--conf F | dir flags]``: rebuild the location index of
each of this host's bookie's ledger directories from its entry logs (BookKeeper's command of the
same name), after the index was lost or damaged. The bookie must be stopped (exit 1 otherwise:
it holds the indexes' locks). Each old index is kept beside the new one as
``current/locations.<time>.bak``; remove it once the bookie serves again. Only records whose
CRC checks out are indexed. Exit 1 also when a record was damaged or an entry log could not be
read to its end (what it held before the damage is indexed), or a directory could not be done."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bookie.storage.offline import RebuildReport, rebuild_locations
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs, for_each_ledger_dir


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "rebuild-db-ledger-locations-index",
        help="rebuild a stopped bookie's entry location indexes from its entry logs",
    )
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


def _lines(report: RebuildReport) -> list[str]:
    lines = [f"{report.directory}: {report.entries_indexed} entries indexed from {report.logs_scanned}"
             f" entry log(s), {report.entries_skipped} of deleted ledgers skipped"]
    if report.backup:
        lines.append(f"  the old index is kept as {report.backup}")
    lines += [f"  DAMAGED, not indexed: {problem}" for problem in report.damaged_entries]
    if report.damaged > len(report.damaged_entries):
        lines.append(f"  ... and {report.damaged - len(report.damaged_entries)} more damaged records")
    lines += [f"  UNREADABLE: {problem}" for problem in report.unreadable_logs]
    return lines


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    reports, failures = await for_each_ledger_dir(dirs, lambda _, directory: rebuild_locations(directory))
    ok = not failures and not any(r.unreadable_logs or r.damaged for r in reports)
    lines = [line for r in reports for line in _lines(r)]
    lines += [f"{directory}: NOT rebuilt: {why}" for directory, why in failures.items()]
    ctx.emit({"ok": ok, "directories": [dataclasses.asdict(r) for r in reports], "failed": failures},
             "\n".join(lines))
    return 0 if ok else EXIT_FAILED
