"""Offline tools over one ledger directory, for an operator on the bookie's host (BookKeeper's
``localconsistencycheck`` and ``rebuild-db-ledger-locations-index``).

- :func:`check_directory` reads every entry the location index points at and checks its record
  (ids and CRC32C), and walks every entry log for entries of live ledgers that the index lacks.
  The second half is what BookKeeper's check cannot see: a lost or truncated index leaves the
  bookie answering "no such entry" for data it still has. It opens RocksDB read-only, so it also
  runs beside a live bookie, though garbage collection may then delete a log under it.
- :func:`rebuild_locations` builds a new location index from the entry logs (ascending log ids,
  so the newest copy of a compacted entry wins), for the ledgers the ledger index holds, and
  swaps it in, keeping the old one as ``locations.<time>.bak``. It needs the bookie stopped:
  it takes the indexes' RocksDB locks, which a running bookie holds.

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
from .kv import KeyValueStorage, MemoryKeyValueStorage, RocksKeyValueStorage

CURRENT = "current"
LEDGERS_INDEX = "ledgers"
LOCATIONS_INDEX = "locations"
MAX_LISTED_PROBLEMS = 100  # each report names this many; the counts cover all
_REBUILD_BATCH = 10_000
_ALL_KEYS = (LEDGER_KEY.pack(0), b"\x80")  # every non-negative ledger id's keys


class DirectoryInUseError(RuntimeError):
    """A running bookie holds the directory's indexes."""


@dataclass
class ConsistencyReport:
    directory: str
    ledgers: int = 0
    entries_checked: int = 0
    bad_entries: int = 0  # indexed, but the record is missing, damaged or another entry's
    unindexed_entries: int = 0  # in an entry log, of a live ledger, unknown to the index
    unreadable_logs: int = 0
    missing_indexes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        problems = self.bad_entries + self.unindexed_entries + self.unreadable_logs
        return not (problems or self.missing_indexes)

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
    entries_indexed: int = 0
    entries_skipped: int = 0  # of ledgers the ledger index does not hold (deleted ones)
    unreadable_logs: list[str] = field(default_factory=list)
    backup: str | None = None  # where the old index went


def open_index(path: Path, *, read_only: bool) -> KeyValueStorage:
    """A directory's RocksDB index; :class:`DirectoryInUseError` when a bookie holds its lock."""
    try:
        return RocksKeyValueStorage(path, read_only=read_only)
    except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
        if "lock" in str(exc).lower():
            raise DirectoryInUseError(f"{path} is in use, by a running bookie: stop it first") from exc
        raise


def _records(
    logger: EntryLogger, log_id: int, damaged: Callable[[str], None]
) -> Iterator[tuple[int, int, int, int]]:
    """A log's records as far as they can be walked; what stops the walk goes to ``damaged``."""
    try:
        yield from logger.iter_records(log_id)
    except CorruptEntryError as exc:
        damaged(str(exc))


def check_directory(root: Path) -> ConsistencyReport:
    current = root / CURRENT
    report = ConsistencyReport(str(root))
    if not current.is_dir():
        return report  # never used: nothing to check
    live: set[int] = set()
    if (current / LEDGERS_INDEX).is_dir():
        ledgers_kv = open_index(current / LEDGERS_INDEX, read_only=True)
        try:
            live = set(LedgerIndex(ledgers_kv).ids())
        finally:
            ledgers_kv.close()
    else:
        report.missing_indexes.append(str(current / LEDGERS_INDEX))
    report.ledgers = len(live)
    locations: KeyValueStorage = MemoryKeyValueStorage()  # a missing index holds nothing
    if (current / LOCATIONS_INDEX).is_dir():
        locations = open_index(current / LOCATIONS_INDEX, read_only=True)
    else:
        report.missing_indexes.append(str(current / LOCATIONS_INDEX))
    logger = EntryLogger(current, size_limit=0)
    try:
        _check_indexed(locations, logger, report)
        for log_id in logger.finished_log_ids():
            for offset, ledger_id, entry_id, _length in _records(logger, log_id, report.log_damaged):
                if ledger_id in live and locations.get(ENTRY_KEY.pack(ledger_id, entry_id)) is None:
                    report.unindexed_entries += 1
                    report.note(f"entry {ledger_id}/{entry_id} at offset {offset} of entry log"
                                f" {log_name(log_id)} is not in the index")
    finally:
        locations.close()
        logger.close()
    return report


def _check_indexed(locations: KeyValueStorage, logger: EntryLogger, report: ConsistencyReport) -> None:
    """Read back every entry the index points at."""
    for key, value in locations.range(*_ALL_KEYS):
        ledger_id, entry_id = ENTRY_KEY.unpack(key)
        log_id, offset, length = LOCATION.unpack(value)
        report.entries_checked += 1
        try:
            data = logger.read_span(log_id, offset, RECORD_HEADER_SIZE + length)
            EntryLogger.decode(data, 0, ledger_id, entry_id, length)
        except FileNotFoundError:
            problem = f"entry log {log_name(log_id)} is missing"
        except CorruptEntryError as exc:
            problem = str(exc)
        else:
            continue
        report.bad_entries += 1
        report.note(f"entry {ledger_id}/{entry_id} (log {log_name(log_id)}, offset {offset}): {problem}")


def rebuild_locations(root: Path) -> RebuildReport:
    current = root / CURRENT
    report = RebuildReport(str(root))
    if not (current / LEDGERS_INDEX).is_dir():
        raise FileNotFoundError(f"{current / LEDGERS_INDEX}: no ledger index, so no ledger to index")
    ledgers_kv = open_index(current / LEDGERS_INDEX, read_only=False)  # the lock: no bookie runs
    try:
        live = set(LedgerIndex(ledgers_kv).ids())
        old = current / LOCATIONS_INDEX
        if old.exists():
            open_index(old, read_only=False).close()  # held too, if a bookie runs
        fresh = current / f"{LOCATIONS_INDEX}.rebuild"
        shutil.rmtree(fresh, ignore_errors=True)  # left by a rebuild cut short
        _fill(fresh, EntryLogger(current, size_limit=0), live, report)
        if old.exists():
            backup = current / f"{LOCATIONS_INDEX}.{int(time.time())}.bak"
            old.rename(backup)
            report.backup = str(backup)
        fresh.rename(old)
        fsync_dir(current)
    finally:
        ledgers_kv.close()
    return report


def _fill(path: Path, logger: EntryLogger, live: set[int], report: RebuildReport) -> None:
    index = open_index(path, read_only=False)
    batch: list[tuple[bytes, bytes]] = []
    try:
        for log_id in logger.finished_log_ids():
            report.logs_scanned += 1
            damaged = report.unreadable_logs.append
            for offset, ledger_id, entry_id, length in _records(logger, log_id, damaged):
                if ledger_id not in live:
                    report.entries_skipped += 1
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
