"""Rebuild a ledger directory's ledger index (BookKeeper's ``rebuild-db-ledgers-index``), for an
operator on the bookie's host with the bookie stopped, after that index was lost or damaged.

The entry logs and journals name every ledger the directory holds data of, but not what the
index kept about them, so each ledger found is recorded as BookKeeper's rebuild does:

- **Fenced.** Whether a fence request was served is not in the entry logs, and losing a fence is
  unsafe: a writer that was fenced out would add entries again. A recovery (which fences anyway)
  still adds and reads as before.
- **With the master key of its last MASTER_KEY journal record**, when a journal still holds one
  (they are kept ``journalMaxBackups`` files back). Otherwise with an empty key, which the
  bookie gives the first key a client presents (``Bookie``: BookKeeper's
  ``LedgerMetadataIndex.setMasterKey`` does the same with keys of imported or rebuilt ledgers).

The directory's share of the journals' ledgers is the bookie's (``ledger id % directories``), so
``dir_index`` and ``dir_count`` must be those of the bookie's configuration. A ledger deleted
meanwhile comes back as an empty fenced ledger with no entries: garbage collection removes it
again, as it is not in ZooKeeper. The old index is kept as ``ledgers.<time>.bak``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .api import LedgerRecord
from .entry_logger import EntryLogger
from .indexes import LedgerIndex
from .journal_format import (
    FILE_HEADER_SIZE,
    LEDGER_ID,
    FileRecords,
    RecordType,
    ScanEnd,
    check_file_header,
    file_ids,
    file_name,
)
from .ledger_directory import CURRENT, LEDGERS_INDEX, index_locks, open_index
from .offline import records, swap_in

__all__ = ["LedgersRebuildReport", "rebuild_ledgers"]


@dataclass
class LedgersRebuildReport:
    directory: str
    ledgers: int = 0  # recorded in the new index
    keys_found: int = 0  # of them, with a master key from a journal (the others: empty)
    logs_scanned: int = 0
    journals_scanned: int = 0
    unreadable: list[str] = field(default_factory=list)  # logs or journals not read to their end
    backup: str | None = None  # where the old index went


def rebuild_ledgers(
    root: Path, journal_dirs: Iterable[Path], dir_index: int, dir_count: int
) -> LedgersRebuildReport:
    """Rebuild ``root``'s ledger index from its entry logs and the bookie's journals (each
    ``journal_dirs`` entry as configured: its files are under ``current/``)."""
    if not 0 <= dir_index < dir_count:
        raise ValueError(f"directory {dir_index} of {dir_count}: no such ledger directory")
    current = root / CURRENT
    report = LedgersRebuildReport(str(root))
    with index_locks([root]):
        in_logs: set[int] = set()  # all this directory's, whatever the configuration says
        logger = EntryLogger(current, size_limit=0)
        try:
            for log_id in logger.finished_log_ids():
                report.logs_scanned += 1
                walked = records(logger, log_id, report.unreadable.append)
                in_logs.update(ledger_id for _, ledger_id, _, _ in walked)
        finally:
            logger.close()
        in_journals: set[int] = set()
        keys: dict[int, bytes] = {}
        for journal_dir in journal_dirs:
            _scan_journals(Path(journal_dir) / CURRENT, in_journals, keys, report)
        mine = sorted(in_logs | {i for i in in_journals | keys.keys() if i % dir_count == dir_index})
        fresh = current / f"{LEDGERS_INDEX}.rebuild"
        shutil.rmtree(fresh, ignore_errors=True)  # left by a rebuild cut short
        kv = open_index(fresh)
        try:
            index = LedgerIndex(kv)
            for ledger_id in mine:
                index.put(ledger_id, LedgerRecord(keys.get(ledger_id, b""), fenced=True))
            kv.sync()
        finally:
            kv.close()
        report.ledgers = len(mine)
        report.keys_found = sum(1 for i in mine if i in keys)
        report.backup = swap_in(fresh, current / LEDGERS_INDEX)
    return report


def _scan_journals(
    directory: Path, found: set[int], keys: dict[int, bytes], report: LedgersRebuildReport
) -> None:
    """Every ledger id in the journal files of ``directory`` into ``found``; the last master key
    recorded for a ledger into ``keys`` (files and records in the order they were written)."""
    if not directory.is_dir():
        return
    for journal_id in file_ids(directory):
        scan = FileRecords(directory / file_name(journal_id), FILE_HEADER_SIZE)
        try:
            if not check_file_header(scan.header(), journal_id):
                report.unreadable.append(f"journal {scan.path}: no valid header")
                continue
            report.journals_scanned += 1
            for rtype, payload, _ in scan:
                ledger_id = LEDGER_ID.unpack_from(payload)[0]
                if rtype is RecordType.MASTER_KEY:
                    keys[ledger_id] = bytes(payload[LEDGER_ID.size :])
                else:
                    found.add(ledger_id)
        except OSError as exc:
            report.unreadable.append(f"journal {scan.path}: {exc}")
            continue
        if scan.why is ScanEnd.CORRUPT:
            report.unreadable.append(f"journal {scan.path}: a damaged record at offset {scan.end}")
