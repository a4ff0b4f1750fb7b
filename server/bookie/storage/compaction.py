"""Entry-log compaction (BookKeeper's ``EntryLogCompactor``): a finished log that holds little live
data is rewritten. Its live entries are copied to the current log, the location index is pointed
at the copies, and then the old log is deleted.

An entry is live when the location index still points at its record in this log: a record of a
deleted ledger, or one the index has since moved away from, is left behind.

Crash safety comes from the order of the steps:

1. the copies are fsynced before the index names them;
2. the index is synced before the old log goes.

A crash at any point leaves every entry readable from one log or the other.

The work goes in slices under the ledger directory's lock, so a write-cache flush waits at most one
slice, and between slices a byte-rate throttle (``compactionRateByBytes``) keeps compaction from
crowding out foreground I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .entry_logger import RECORD_HEADER_SIZE, EntryLogger

if TYPE_CHECKING:
    from .ledger_directory import LedgerDirectory

log = logging.getLogger(__name__)

SLICE_BYTES = 4 * 1024 * 1024  # record bytes examined per slice (and held in memory)

Record = tuple[int, int, int, int]  # offset, ledger id, entry id, body length


@dataclass(frozen=True)
class Compacted:
    """Totals of one compaction pass."""

    logs: int = 0
    reclaimed_bytes: int = 0  # size of the deleted logs less the bytes copied out of them


class CompactionStopped(Exception):
    """The bookie is closing: the pass ends between slices, every step so far complete."""


class ByteThrottle:
    """At most ``rate`` bytes and ``entries_rate`` entries per second on average since the pass
    began (0: no limit); its pauses end early, raising :class:`CompactionStopped`, once ``stop``
    is set."""

    def __init__(self, rate: int, stop: threading.Event | None = None, entries_rate: int = 0) -> None:
        self._rate = rate
        self._entries_rate = entries_rate
        self._stop = stop or threading.Event()
        self._began = time.monotonic()
        self._done = 0
        self._entries = 0

    def check(self) -> None:
        """Raise :class:`CompactionStopped` if the bookie is closing."""
        if self._stop.is_set():
            raise CompactionStopped

    def pause(self, nbytes: int, entries: int = 0) -> None:
        self._done += nbytes
        self._entries += entries
        due = self._began
        if self._rate > 0:
            due = max(due, self._began + self._done / self._rate)
        if self._entries_rate > 0:
            due = max(due, self._began + self._entries / self._entries_rate)
        wait = due - time.monotonic()
        if wait > 0:
            self._stop.wait(wait)  # returns at once when the bookie starts closing
        self.check()


def compact_entry_log(directory: LedgerDirectory, log_id: int, throttle: ByteThrottle) -> int:
    """Copy the live entries of finished log ``log_id`` of ``directory`` to its current log;
    returns the bytes moved. The caller deletes the log. ``CorruptEntryError`` if the log cannot
    be read to its end (it must then stay), ``CompactionStopped`` if the bookie is closing."""
    logger = directory.entry_logger
    moved = 0
    batch: list[Record] = []
    batch_bytes = 0
    throttle.check()
    for record in logger.iter_records(log_id):
        batch.append(record)
        batch_bytes += RECORD_HEADER_SIZE + record[3]
        if batch_bytes >= SLICE_BYTES:
            throttle.check()
            moved += _move_live(directory, log_id, batch)
            throttle.pause(batch_bytes, len(batch))
            batch, batch_bytes = [], 0
    if batch:
        throttle.check()
        moved += _move_live(directory, log_id, batch)
        throttle.pause(batch_bytes, len(batch))
    return moved


def _move_live(directory: LedgerDirectory, log_id: int, records: list[Record]) -> int:
    """Copy the live ones among ``records`` (consecutive records of the log) to the current log
    and re-point the index at them; returns the bytes copied."""
    logger = directory.entry_logger
    with directory.lock:
        if directory.closed:
            raise CompactionStopped
        live = [
            (offset, ledger_id, entry_id, length)
            for offset, ledger_id, entry_id, length in records
            if directory.locations.get(ledger_id, entry_id) == (log_id, offset, length)
        ]
        if not live:
            return 0
        start = live[0][0]
        data = logger.read_span(log_id, start, live[-1][0] + RECORD_HEADER_SIZE + live[-1][3] - start)
        by_ledger: dict[int, dict[int, bytes]] = {}
        for offset, ledger_id, entry_id, length in live:
            # checked (ids, CRC) like a read: a damaged record stops the compaction of this log,
            # which then stays, rather than being copied as if it were sound
            body = EntryLogger.decode(data, offset - start, ledger_id, entry_id, length)
            by_ledger.setdefault(ledger_id, {})[entry_id] = body
        keys: list[bytes] = []
        locations: list[bytes] = []
        for ledger_id in sorted(by_ledger):
            entries = by_ledger[ledger_id]
            more_keys, more_locations = logger.append(ledger_id, sorted(entries), entries)
            keys += more_keys
            locations += more_locations
        logger.sync()  # the copies are durable before the index names them
        directory.locations.add_batch(keys, locations)
        directory.locations.sync()
        return sum(RECORD_HEADER_SIZE + length for *_, length in live)
