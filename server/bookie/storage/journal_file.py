"""One open journal file, zero-filled ahead of its writer by a helper thread.

Why zero-fill at all: a group ``fdatasync`` into blocks that already exist and hold data commits
no metadata, and costs markedly less than an append that grows the file (the same holds for
``posix_fallocate``'s unwritten extents). Figures: docs/performance.md.

Why ahead, on another thread: filling ``journalPreAllocSizeMB`` (16 MiB) inline, when the writer
reached the end of what was filled, meant writing and fsyncing 16 MiB in the commit path, every
second or so at a high add rate, and every add of that group waited for it.
The helper keeps at least one such chunk filled beyond the write offset, one piece at a time,
each piece fdatasynced by the helper so few dirty zero pages are left for the writer's own sync.

The writer never waits for the helper unless it catches up with it; then it appends past the
filled end (a plain, slightly dearer append) once the piece in progress is done, never into it.

Synced pages leave the page cache (BookKeeper's ``journalRemovePagesFromCache``, on by default):
nothing reads a journal but replay at start-up, so its pages only grow the cache, at the rate the
bookie writes, and push the entry logs' pages out. On a VM they also cost CPU: a write into a
page the guest never touched is several times slower than into a recycled one, and the bookies'
kernel time grew with a long run's page cache until the journal's pages were dropped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from .fileio import fsync_dir, pwrite_all
from .journal_format import (
    FILE_HEADER_SIZE,
    FileRecords,
    RecordType,
    ScanEnd,
    file_header,
    file_ids,
    file_name,
)

log = logging.getLogger(__name__)

_PIECE = 1024 * 1024  # bytes zero-filled (and synced) per step of the helper
_ZEROS = memoryview(bytes(_PIECE))
_DROP_STEP = 1024 * 1024  # synced journal bytes removed from the page cache at a time


class AppendFile(Protocol):
    """An open journal file, as the journal's writer uses it."""

    journal_id: int
    offset: int  # where the next append goes

    def append(self, data: bytes) -> int: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...


class RecordScan(Protocol):
    """A journal file's valid records from ``start`` (``FileRecords``); after iterating, ``end``
    and ``why`` say where and why the scan stopped."""

    start: int
    end: int
    why: ScanEnd

    def header(self) -> bytes: ...
    def __iter__(self) -> Iterator[tuple[RecordType, memoryview, int]]: ...


class JournalFiles(Protocol):
    """Where one journal's files live: a directory on disk (:class:`JournalDirectory`), or the
    simulation's disk, whose files lose what was not synced when it crashes."""

    def ids(self) -> list[int]: ...
    def create(self, journal_id: int) -> AppendFile: ...
    def records(self, journal_id: int, start: int) -> RecordScan: ...
    def remove(self, journal_id: int) -> None: ...


class JournalDirectory:
    """A journal's files in ``path``, each a :class:`JournalFile` while it is written."""

    def __init__(self, path: Path, fill_ahead: int, remove_pages_from_cache: bool = True) -> None:
        self.path = path
        self._fill_ahead = fill_ahead
        self._remove_pages = remove_pages_from_cache

    def ids(self) -> list[int]:
        # made here, at replay: a path that cannot be a directory stops the bookie's start
        self.path.mkdir(parents=True, exist_ok=True)
        return file_ids(self.path)

    def create(self, journal_id: int) -> JournalFile:
        return JournalFile(self.path, journal_id, self._fill_ahead, self._remove_pages)

    def records(self, journal_id: int, start: int) -> FileRecords:
        return FileRecords(self.path / file_name(journal_id), start)

    def remove(self, journal_id: int) -> None:
        (self.path / file_name(journal_id)).unlink(missing_ok=True)


class JournalFile:
    """Appends at :attr:`offset`; only the journal's writer thread calls :meth:`append` and
    :meth:`sync`. :meth:`close` stops the helper before closing the file."""

    def __init__(
        self, directory: Path, journal_id: int, fill_ahead: int, remove_pages_from_cache: bool = True
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / file_name(journal_id)
        self.journal_id = journal_id
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.offset = FILE_HEADER_SIZE
        self._fill_ahead = max(1, fill_ahead)
        self._piece = min(_PIECE, self._fill_ahead)
        self._remove_pages = remove_pages_from_cache
        self._dropped = 0  # bytes [0, _dropped) were removed from the page cache
        self._filled = FILE_HEADER_SIZE  # bytes [0, _filled) are zero-filled or written
        self._filling = False  # the helper is writing a piece at _filled (it owns those bytes)
        self._closing = False
        self._changed = threading.Condition()
        try:
            pwrite_all(self._fd, file_header(journal_id), 0)
            self._fill_piece()  # the first piece inline, so the first groups find filled blocks
            os.fsync(self._fd)
            fsync_dir(directory)
        except OSError:  # e.g. a full disk: the file stays (replay skips a bad header), the fd not
            os.close(self._fd)
            raise
        self._helper = threading.Thread(target=self._fill_loop, name="bookie-journal-fill", daemon=True)
        self._helper.start()
        log.info("journal file %s opened", path)

    # ---- writer thread --------------------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; return the new offset."""
        end = self.offset + len(data)
        if end <= self._filled:  # the helper only ever writes at or beyond _filled
            self._pwrite(data)
        else:
            with self._changed:  # caught up with the helper: wait out its piece, append past it
                while self._filling:
                    self._changed.wait()
                self._pwrite(data)
                self._filled = max(self._filled, end)
        self.offset = end
        if self._filled - end < self._fill_ahead:
            with self._changed:
                self._changed.notify_all()
        return end

    def _pwrite(self, data: bytes) -> None:
        pwrite_all(self._fd, data, self.offset)

    def sync(self) -> None:
        os.fdatasync(self._fd)
        if self._remove_pages and self.offset - self._dropped >= _DROP_STEP:
            # Synced, so clean: DONTNEED drops them. Whole steps below the offset only: the
            # page holding the offset takes the next write, and a page missing from the cache
            # would have to be read back from disk before a partial write into it.
            upto = self.offset // _DROP_STEP * _DROP_STEP
            os.posix_fadvise(self._fd, self._dropped, upto - self._dropped, os.POSIX_FADV_DONTNEED)
            self._dropped = upto

    def close(self) -> None:
        """Idempotent: the fd number may belong to another file once closed."""
        if self._fd < 0:
            return
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._helper.join()  # at most one piece write and sync
        os.close(self._fd)
        self._fd = -1

    # ---- helper thread --------------------------------------------------------------------

    def _fill_loop(self) -> None:
        while True:
            with self._changed:
                while not self._closing and self._filled - self.offset >= self._fill_ahead:
                    self._changed.wait()
                if self._closing:
                    return
                self._filling = True
            try:
                self._fill_piece()
                os.fdatasync(self._fd)
            except OSError as exc:  # e.g. a full disk: the writer appends, and fails on its own
                log.warning("journal %x: zero-filling ahead stopped: %s", self.journal_id, exc)
                with self._changed:
                    self._filling = False
                    self._changed.notify_all()
                return

    def _fill_piece(self) -> None:
        """Zero-fill from ``_filled`` to the next piece boundary; publish the new end."""
        start = self._filled
        end = (start // self._piece + 1) * self._piece
        pos = start
        while pos < end:
            pos += os.pwrite(self._fd, _ZEROS[: end - pos], pos)
        with self._changed:
            self._filled = max(self._filled, end)
            self._filling = False
            self._changed.notify_all()
