"""The garbage in one ledger directory's entry logs: logs left holding no live ledger are deleted,
and logs holding little live data are compacted (see :mod:`compaction`).

Only finished logs are looked at, and a finished log never changes. So their ledger maps are read
and weighed without the directory's lock: a flush is never held up by a log being read. The lock is
taken for each deletion, and liveness is checked again under it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .compaction import ByteThrottle, Compacted, CompactionStopped, compact_entry_log
from .entry_logger import CorruptEntryError, log_name

if TYPE_CHECKING:
    from .ledger_directory import LedgerDirectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogFacts:
    """One entry log as garbage collection sees it, for ``gcexplain`` (``bookie.gc.explain``)."""

    log_id: int
    directory: str
    size: int
    mtime: float  # seconds since the epoch: when it was last written
    ledgers: dict[int, int]  # bytes per ledger (its ledger map); empty when unreadable
    stored: frozenset[int]  # those of its ledgers this bookie still stores (not yet collected)
    current: bool = False  # being written: never collected
    unreadable: bool = False  # its ledger map could not be read: kept


@dataclass(frozen=True)
class LogUsage:
    """What garbage collection found in the finished entry logs."""

    deleted_logs: int = 0
    reclaimed_bytes: int = 0
    active_logs: int = 0
    active_bytes: int = 0


class EntryLogGarbage:
    """Used by one garbage-collection run at a time (the bookie's collector)."""

    def __init__(self, directory: LedgerDirectory) -> None:
        self._dir = directory
        self._maps: dict[int, dict[int, int]] = {}  # finished log -> bytes per ledger
        self._live_share: dict[int, float] = {}  # finished log -> live share, at the last reclaim
        self._unreadable: dict[int, int] = {}  # log that could not be read -> its size then

    def reclaim(self) -> LogUsage:
        """Delete every finished log none of whose ledgers still exists here, and note the
        live share of the others for :meth:`compact`."""
        directory = self._dir
        logger = directory.entry_logger
        with directory.lock:
            if directory.closed:
                return LogUsage()
            finished = logger.finished_log_ids()
        for gone in set(self._maps).union(self._unreadable).difference(finished):
            self._forget(gone)
        self._live_share = {}
        deleted = reclaimed = active = active_bytes = 0
        for log_id in finished:
            size = logger.log_size(log_id)
            usage = self._maps.get(log_id)
            if usage is None:
                if self._unreadable.get(log_id) == size:
                    continue  # known bad: not read in full again at every run
                try:
                    usage = self._maps[log_id] = logger.ledger_map(log_id)
                except (OSError, CorruptEntryError) as exc:
                    self._unreadable[log_id] = size
                    log.error("entry log %x of %s is kept: cannot tell what it holds: %s",
                              log_id, logger.directory, exc)
                    continue
            live = self._live_bytes(usage)
            if not live and self._delete_if_dead(log_id, usage):
                self._forget(log_id)
                deleted += 1
                reclaimed += size
                log.info("deleted entry log %x of %s: no live ledger left in it (%d bytes)",
                         log_id, logger.directory, size)
                continue
            if directory.closed:
                break
            active += 1
            active_bytes += size
            self._live_share[log_id] = live / max(1, sum(usage.values()))
        return LogUsage(deleted, reclaimed, active, active_bytes)

    def compact(self, threshold: float, throttle: ByteThrottle) -> Compacted:
        """Rewrite the logs whose live share at the last :meth:`reclaim` (by their ledger maps, as
        BookKeeper measures it) is below ``threshold``."""
        directory = self._dir
        logger = directory.entry_logger
        # the least used first: they free the most for the bytes they copy, and a pass cut short
        # by its time limit (minor/majorCompactionMaxTimeMillis) has done the best part
        shares = self._live_share
        candidates = sorted((log_id for log_id, share in shares.items() if share < threshold),
                            key=lambda log_id: (shares[log_id], log_id))
        logs = reclaimed = 0
        for log_id in candidates:
            try:
                moved = compact_entry_log(directory, log_id, throttle)
                with directory.lock:
                    if directory.closed:
                        raise CompactionStopped
                    size = logger.log_size(log_id)
                    logger.delete_log(log_id)
            except CompactionStopped:
                break
            except (OSError, CorruptEntryError) as exc:
                log.error("compaction of entry log %x of %s failed, the log stays: %s",
                          log_id, logger.directory, exc)
                continue
            self._forget(log_id)
            logs += 1
            reclaimed += size - moved
            log.info("compacted entry log %x of %s: %d live bytes moved, %d freed",
                     log_id, logger.directory, moved, size - moved)
        return Compacted(logs, reclaimed)

    def facts(self) -> list[LogFacts]:
        """Every entry log of the directory, the current one too (reads the maps it has not
        cached; takes the lock only to list the logs)."""
        directory = self._dir
        logger = directory.entry_logger
        with directory.lock:
            if directory.closed:
                return []
            finished = logger.finished_log_ids()
            current = logger.current_id
        out = []
        for log_id in [*finished, *([current] if current >= 0 else [])]:
            path = logger.directory / log_name(log_id)
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            usage: dict[int, int] = {}
            unreadable = False
            if log_id != current:
                try:
                    usage = self._maps.get(log_id) or logger.ledger_map(log_id)
                except (OSError, CorruptEntryError):
                    unreadable = True
            ledgers = directory.ledgers
            stored = frozenset(lid for lid in usage if ledgers.get(lid) is not None)
            out.append(LogFacts(log_id, str(logger.directory), stat.st_size, stat.st_mtime, usage, stored,
                                current=log_id == current, unreadable=unreadable))
        return out

    def _delete_if_dead(self, log_id: int, usage: dict[int, int]) -> bool:
        """Delete the log if, checked again under the lock, none of its ledgers exists (one may
        have been re-created since the first look)."""
        with self._dir.lock:
            if self._dir.closed or self._live_bytes(usage):
                return False
            self._dir.entry_logger.delete_log(log_id)
            return True

    def _live_bytes(self, usage: dict[int, int]) -> int:
        ledgers = self._dir.ledgers
        return sum(n for ledger_id, n in usage.items() if ledgers.get(ledger_id) is not None)

    def _forget(self, log_id: int) -> None:
        self._maps.pop(log_id, None)
        self._live_share.pop(log_id, None)
        self._unreadable.pop(log_id, None)
