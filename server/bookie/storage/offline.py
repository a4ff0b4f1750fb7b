"""Offline tools over one ledger directory, for an operator on the bookie's host with the bookie
stopped (BookKeeper's ``localconsistencycheck`` and ``rebuild-db-ledger-locations-index``). Both
hold the indexes' RocksDB locks while they work, so they refuse (:class:`DirectoryInUseError`)
while a bookie runs (its flushes and garbage collection would change the files under them) and
no bookie starts meanwhile. They read the existing indexes read-only: RocksDB's recovery of a
damaged log would otherwise rewrite the very index being inspected or backed up.

- :func:`check_directory` reads back every entry the location index points at (ids and CRC32C)
  and walks every entry log for entries of live ledgers that the index lacks. The second half
  is what BookKeeper's check cannot see: a lost or truncated index leaves a bookie answering
  "no such entry" for data it still has.
- :func:`rebuild_locations` builds a new location index from the entry logs, for the ledgers
  the ledger index holds, and swaps it in; the old one (even one RocksDB cannot open) is kept as
  ``locations.<time>.bak``. Logs are read in ascending order so the newest copy of a compacted
  entry wins, and only records whose CRC checks out are indexed: a copy torn by a crash never
  hides an intact older one.

Entries still only in the journal are not the index's business: a bookie replays them into new
entry logs at its next start.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .entry_logger import LOCATION, RECORD_HEADER_SIZE, CorruptEntryError, EntryLogger, log_name
from .fileio import fsync_dir
from .indexes import ENTRY_KEY, LEDGER_KEY, LedgerIndex
from .kv import KeyValueStorage, MemoryKeyValueStorage
from .ledger_directory import (
    CURRENT,
    LEDGERS_INDEX,
    LOCATIONS_INDEX,
    DirectoryInUseError,
    LostIndexError,
    index_locks,
    open_index,
    read_only_kv,
)

MAX_LISTED_PROBLEMS = 100  # each report names this many; the counts cover all
_REBUILD_BATCH = 10_000
_ALL_KEYS = (LEDGER_KEY.pack(0), b"\x80")  # every non-negative ledger id's keys

__all__ = [
    "ConsistencyReport", "DirectoryInUseError", "LostIndexError", "RebuildReport", "check_directory",
    "rebuild_locations", "records", "swap_in",
]


@dataclass
class ConsistencyReport:
    directory: str
    checked: bool = True  # False: not a bookie directory (no current/), nothing was checked
    ledgers: int = 0
    entries_checked: int = 0
    bad_entries: int = 0  # indexed, but the record is missing, damaged or another entry's
    unindexed_entries: int = 0  # in an entry log, of a live ledger, unknown to the index
    unreadable_logs: int = 0
    index_problems: list[str] = field(default_factory=list)  # an index missing or unreadable
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        found = self.bad_entries + self.unindexed_entries + self.unreadable_logs
        return self.checked and not (found or self.index_problems)

    def note(self, problem: str) -> None:
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(problem)

    def log_damaged(self, problem: str) -> None:
        self.unreadable_logs += 1
        self.note(problem)


@dataclass
class RebuildReport:
    directory: str
    logs_scanned: int = 0
    entries_indexed: int = 0  # records indexed (a compacted entry's older copies count too)
    entries_skipped: int = 0  # of ledgers the ledger index does not hold (deleted ones)
    damaged: int = 0  # records not indexed: their CRC or ids do not check out
    damaged_entries: list[str] = field(default_factory=list)  # the first of them
    unreadable_logs: list[str] = field(default_factory=list)
    backup: str | None = None  # where the old index went


def records(
    logger: EntryLogger, log_id: int, damaged: Callable[[str], None]
) -> Iterator[tuple[int, int, int, int]]:
    """A log's records as far as they can be walked; what stops the walk goes to ``damaged``."""
    try:
        yield from logger.iter_records(log_id)
    except CorruptEntryError as exc:
        damaged(str(exc))


def _record_problem(
    logger: EntryLogger, log_id: int, offset: int, ids: tuple[int, int], length: int
) -> str | None:
    """Why the record at ``offset`` cannot be served as entry ``ids``, or None if it can."""
    try:
        data = logger.read_span(log_id, offset, RECORD_HEADER_SIZE + length)
        EntryLogger.decode(data, 0, ids[0], ids[1], length)
    except FileNotFoundError:
        return f"entry log {log_name(log_id)} is missing"
    except CorruptEntryError as exc:
        return str(exc)
    return None


def check_directory(root: Path) -> ConsistencyReport:
    current = root / CURRENT
    report = ConsistencyReport(str(root))
    if not current.is_dir():
        report.checked = False
        return report
    held: list[KeyValueStorage] = []
    with index_locks([root]):
        logger = EntryLogger(current, size_limit=0)
        try:
            live: set[int] = set()
            ledgers_kv = _open_for_check(current / LEDGERS_INDEX, report, held)
            if ledgers_kv is not None:
                live = set(LedgerIndex(ledgers_kv).ids())
            report.ledgers = len(live)
            locations = _open_for_check(current / LOCATIONS_INDEX, report, held) or MemoryKeyValueStorage()
            _check_indexed(locations, logger, report)
            for log_id in logger.finished_log_ids():
                for offset, ledger_id, entry_id, _length in records(logger, log_id, report.log_damaged):
                    if ledger_id in live and locations.get(ENTRY_KEY.pack(ledger_id, entry_id)) is None:
                        report.unindexed_entries += 1
                        report.note(f"entry {ledger_id}/{entry_id} at offset {offset} of entry log"
                                    f" {log_name(log_id)} is not in the index")
        finally:
            for kv in held:
                kv.close()
            logger.close()
    return report


def _check_indexed(locations: KeyValueStorage, logger: EntryLogger, report: ConsistencyReport) -> None:
    """Read back every entry the index points at."""
    for key, value in locations.range(*_ALL_KEYS):
        ids = ENTRY_KEY.unpack(key)
        log_id, offset, length = LOCATION.unpack(value)
        report.entries_checked += 1
        if (problem := _record_problem(logger, log_id, offset, ids, length)) is not None:
            report.bad_entries += 1
            report.note(f"entry {ids[0]}/{ids[1]} (log {log_name(log_id)}, offset {offset}): {problem}")


def _open_for_check(
    path: Path, report: ConsistencyReport, held: list[KeyValueStorage]
) -> KeyValueStorage | None:
    """The index, read-only, or None after noting why it cannot be read."""
    try:
        kv = open_index(path, read_only_kv, create=False)
    except LostIndexError as exc:
        report.index_problems.append(str(exc))
        return None
    held.append(kv)
    return kv


def rebuild_locations(root: Path) -> RebuildReport:
    current = root / CURRENT
    report = RebuildReport(str(root))
    with index_locks([root]):
        ledgers_kv = open_index(current / LEDGERS_INDEX, read_only_kv, create=False)  # the live ledgers
        try:
            live = set(LedgerIndex(ledgers_kv).ids())
        finally:
            ledgers_kv.close()
        old = current / LOCATIONS_INDEX
        fresh = current / f"{LOCATIONS_INDEX}.rebuild"
        shutil.rmtree(fresh, ignore_errors=True)  # left by a rebuild cut short
        _fill(fresh, EntryLogger(current, size_limit=0), live, report)
        report.backup = swap_in(fresh, old)
    return report


def swap_in(fresh: Path, index: Path) -> str | None:
    """Put the rebuilt index ``fresh`` in the place of ``index``, which is kept as it was (never
    opened: a damaged one is evidence) as ``<name>.<time>.bak``; returns that path, or None when
    there was no old index."""
    backup = None
    if index.exists():
        backup = _backup_name(index)
        index.rename(backup)
    fresh.rename(index)
    fsync_dir(index.parent)
    return None if backup is None else str(backup)


def _backup_name(index: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = index.with_name(f"{index.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        n += 1
        candidate = index.with_name(f"{index.name}.{stamp}-{n}.bak")
    return candidate


def _fill(path: Path, logger: EntryLogger, live: set[int], report: RebuildReport) -> None:
    index = open_index(path)
    batch: list[tuple[bytes, bytes]] = []
    try:
        for log_id in logger.finished_log_ids():
            report.logs_scanned += 1
            walked = records(logger, log_id, report.unreadable_logs.append)
            for offset, ledger_id, entry_id, length in walked:
                if ledger_id not in live:
                    report.entries_skipped += 1
                    continue
                problem = _record_problem(logger, log_id, offset, (ledger_id, entry_id), length)
                if problem is not None:
                    report.damaged += 1
                    if len(report.damaged_entries) < MAX_LISTED_PROBLEMS:
                        report.damaged_entries.append(problem)
                    continue
                batch.append((ENTRY_KEY.pack(ledger_id, entry_id), LOCATION.pack(log_id, offset, length)))
                report.entries_indexed += 1
                if len(batch) >= _REBUILD_BATCH:
                    index.write_batch(batch)
                    batch.clear()
        index.write_batch(batch)
        index.sync()
    finally:
        index.close()
        logger.close()
