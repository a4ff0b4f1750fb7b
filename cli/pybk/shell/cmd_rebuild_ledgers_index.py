"""``rebuild-db-ledgers-index [--conf F | dir flags]``: rebuild the ledger index of each of this
host's bookie's ledger directories from its entry logs and journals (BookKeeper's command of the
same name), after that index was lost or damaged. The bookie must be stopped (exit 1 otherwise).

Every ledger found comes back fenced, and with the master key of its last journal record when a
journal still holds one; a ledger left without a key takes the first one a client presents.
Each old index is kept beside the new one as ``current/ledgers.<time>.bak``. Exit 1 also when an
entry log or journal could not be read to its end, or a directory could not be done."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bookie.storage.rebuild_ledgers import LedgersRebuildReport, rebuild_ledgers
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED
from pybk.shell.local_dirs import add_bookie_dir_options, bookie_dirs, for_each_ledger_dir


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "rebuild-db-ledgers-index",
        help="rebuild a stopped bookie's ledger indexes from its entry logs and journals",
    )
    add_bookie_dir_options(parser)
    parser.set_defaults(run=run)


def _lines(report: LedgersRebuildReport) -> list[str]:
    lines = [f"{report.directory}: {report.ledgers} ledger(s) recorded, fenced ({report.keys_found} with"
             f" a master key from a journal), from {report.logs_scanned} entry log(s) and"
             f" {report.journals_scanned} journal file(s)"]
    if report.backup:
        lines.append(f"  the old index is kept as {report.backup}")
    lines += [f"  UNREADABLE: {problem}" for problem in report.unreadable]
    return lines


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    dirs = bookie_dirs(args)
    count = len(dirs.ledger_dirs)
    reports, failures = await for_each_ledger_dir(
        dirs, lambda index, directory: rebuild_ledgers(directory, dirs.journal_dirs, index, count)
    )
    ok = not failures and not any(r.unreadable for r in reports)
    lines = [line for r in reports for line in _lines(r)]
    lines += [f"{directory}: NOT rebuilt: {why}" for directory, why in failures.items()]
    ctx.emit({"ok": ok, "directories": [dataclasses.asdict(r) for r in reports], "failed": failures},
             "\n".join(lines))
    return 0 if ok else EXIT_FAILED
