"""Entry logs: append-only files of entries sorted by (ledger, entry) at each flush.

Layout: a 1024-byte header ``[magic:4][version:4][logId:8][ledgerMapOffset:8][ledgerMapCount:4]``,
then records ``[size:4][ledgerId:8][entryId:8][crc32c:4][body]`` (size counts everything after the
size field; the CRC32C covers the body so a damaged entry is refused, not served). A log rolls past
``logSizeLimit``; on roll/close its ledger -> bytes map is appended and the header points at it, which
is what garbage collection reads (a log a crash left without one is scanned instead). Logs are never
appended to after a restart: a new one starts.

Appends happen on the flush thread; reads (``os.pread``) on worker threads; garbage collection
lists and deletes finished logs under the ledger directory's lock, which the flush holds too.

The OS page cache keeps at most ``page_cache_keep`` bytes of a log behind its write position
(``entryLogPageCacheMB``, a pybookkeeper key; negative: no limit, BookKeeper's behaviour): older
synced pages are dropped after each flush, and a finished log's at its close. The bookie caches
entries itself (write cache, read-ahead cache), and BookKeeper offers to bypass the page cache for
entry logs altogether (BP-47, ``dbStorage_directIOEntryLogger``). On a VM a growing cache also
costs CPU: a page the guest has not used lately costs several times a recycled one, so the
bookies' kernel time grew with the machine's page cache, while catch-up reads ran as fast either
way (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from pathlib import Path
from typing import BinaryIO, cast

import crc32c

from .fileio import fsync_dir, pwrite_all
from .write_behind import start_write_behind

log = logging.getLogger(__name__)

LOG_MAGIC = b"PBKL"
LOG_VERSION = 1
LOG_HEADER = struct.Struct(">4sIQQI")
LOG_HEADER_SIZE = 1024
RECORD_HEADER = struct.Struct(">IqqI")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 24
LOCATION = struct.Struct(">QQI")  # log id, record offset, body length
MAP_ITEM = struct.Struct(">qQ")
_MAX_OPEN_READERS = 64
_MAX_RECORD_SIZE = 16 * 1024 * 1024  # above any entry a bookie accepts (15 MiB) plus its header
_DROP_STEP = 1024 * 1024  # pages leave the page cache in whole steps of this many bytes


_RECORD_SIZE_AFTER_SIZE_FIELD = RECORD_HEADER_SIZE - 4  # a record's size field counts what follows it


def _body_crcs(entry_ids: Sequence[int], chunk: list[bytes], known: Mapping[int, int] | None) -> list[int]:
    """Each body's CRC32C: ``known``'s where it has the entry, else computed."""
    if known is None:
        return list(map(crc32c.crc32c, chunk))
    crcs: list[int | None] = list(map(known.get, entry_ids))
    if None in crcs:
        return [crc32c.crc32c(body) if crc is None else crc for crc, body in zip(crcs, chunk, strict=True)]
    return cast(list[int], crcs)


class CorruptEntryError(Exception):
    pass


def log_name(log_id: int) -> str:
    return f"{log_id:x}.log"


def parse_log_name(name: str) -> int | None:
    if not name.endswith(".log"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


def _header_without_map(log_id: int) -> bytes:
    return LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, log_id, 0, 0).ljust(LOG_HEADER_SIZE, b"\0")


@dataclass(frozen=True, slots=True)
class WritePosition:
    """Where the next append goes, and the open log's ledger map so far (see ``rewind``)."""

    log_id: int
    offset: int
    ledger_bytes: dict[int, int]


class EntryLogger:
    def __init__(
        self, directory: Path, size_limit: int, reserve_bytes: int = 0, page_cache_keep: int = -1
    ) -> None:
        self.directory = directory
        self.size_limit = size_limit
        self.reserve_bytes = reserve_bytes  # free space a new log needs (see StorageConfig)
        self.page_cache_keep = page_cache_keep  # see the module docstring; negative: no limit
        directory.mkdir(parents=True, exist_ok=True)
        ids = [i for i in (parse_log_name(p.name) for p in directory.iterdir()) if i is not None]
        self._next_id = (max(ids) + 1) if ids else 0
        self._fd = -1
        self.current_id = -1
        self._offset = 0
        self._uncached_below = 0  # bytes [0, this) of the open log were dropped from the page cache
        self._ledger_bytes: dict[int, int] = {}
        self._readers: OrderedDict[int, _Reader] = OrderedDict()
        self._readers_lock = threading.Lock()
        self._closed = False

    # ---- writing (flush thread) -------------------------------------------------------------

    def _open_new(self) -> None:
        if self.reserve_bytes:
            st = os.statvfs(self.directory)
            free = st.f_bavail * st.f_frsize
            if free < self.reserve_bytes:
                raise OSError(errno.ENOSPC, f"{self.directory} has {free} bytes free, less than"
                              f" minUsableSizeForEntryLogCreation={self.reserve_bytes}: no new entry log")
        log_id = self._next_id
        self._next_id += 1
        path = self.directory / log_name(log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            pwrite_all(fd, _header_without_map(log_id), 0)
            fsync_dir(self.directory)
        except OSError:  # the file stays, headerless: garbage collection removes such a log
            os.close(fd)
            raise
        self._fd, self.current_id, self._offset = fd, log_id, LOG_HEADER_SIZE
        self._uncached_below = 0
        self._ledger_bytes = {}

    def _finish_current(self) -> None:
        """Append the ledger map, point the header at it, fsync and close."""
        if self._fd < 0:
            return
        items = sorted(self._ledger_bytes.items())
        data = b"".join(MAP_ITEM.pack(led, n) for led, n in items)
        pwrite_all(self._fd, data, self._offset)
        os.fdatasync(self._fd)  # the map is on disk before the header names it
        header = LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, self.current_id, self._offset, len(items))
        pwrite_all(self._fd, header, 0)
        try:
            os.fsync(self._fd)
        except OSError:
            # The log stays open and later appends go where the map is: the header must not
            # name it, or a scan after a crash would stop there and miss live entries.
            with contextlib.suppress(OSError):
                pwrite_all(self._fd, _header_without_map(self.current_id), 0)
            raise
        if self.page_cache_keep >= 0:  # all synced: the next log's pages are the recent ones now
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(self._fd)
        self._fd = -1
        self.current_id = -1  # no log is being written: this one is finished, for GC too

    def position(self) -> WritePosition:
        return WritePosition(self.current_id, self._offset, dict(self._ledger_bytes))

    def rewind(self, position: WritePosition) -> bool:
        """Forget the appends since ``position``: a flush failed before it indexed them, and its
        retry must write over those bytes, not after them, or every retry on a full disk eats
        another write-cache half of space. Only within the log still open; a log finished since
        keeps its bytes (its ledger map counts them)."""
        if self._fd < 0 or self.current_id != position.log_id:
            return False
        self._offset = position.offset
        self._ledger_bytes = dict(position.ledger_bytes)
        # Cut the bytes off, not only the offset back: a scan after a crash must not run into
        # stale records past the end, and on a full disk the space comes back. The header loses
        # any ledger map a failed _finish_current got as far as naming.
        try:
            os.ftruncate(self._fd, position.offset)
        except OSError as exc:
            log.warning("entry log %d: cannot cut back after a failed flush: %s", self.current_id, exc)
        try:
            pwrite_all(self._fd, _header_without_map(self.current_id), 0)
        except OSError as exc:
            log.warning("entry log %d: cannot reset its header: %s", self.current_id, exc)
        return True

    def append(
        self,
        ledger_id: int,
        entry_ids: Sequence[int],
        bodies: Mapping[int, bytes],
        crcs: Mapping[int, int] | None = None,
    ) -> tuple[list[bytes], list[bytes]]:
        """Append entries ``entry_ids`` (ascending) of one ledger, bodies from ``bodies``; return
        their location-index keys and values, in the same order. ``crcs``: the CRC32C of bodies
        the caller knows already (the write cache's, computed by the add path), by entry id; the
        others are computed here."""
        if self._fd < 0:
            self._open_new()
        start = self._offset
        chunk = list(map(bodies.__getitem__, entry_ids))
        sizes = list(map(len, chunk))
        total = sum(sizes) + RECORD_HEADER_SIZE * len(sizes)
        if start + total <= self.size_limit:  # the usual case: no rollover inside this chunk
            return self._append_fitting(ledger_id, entry_ids, chunk, sizes, start, total, crcs)
        body_crcs = _body_crcs(entry_ids, chunk, crcs)
        keys: list[bytes] = []
        locations: list[bytes] = []
        parts: list[bytes] = []
        pack_rec = RECORD_HEADER.pack
        pack_loc = LOCATION.pack
        pack_key = _KEY.pack
        offset = start
        appended = 0
        for entry_id, body, crc in zip(entry_ids, chunk, body_crcs, strict=True):
            rec_len = RECORD_HEADER_SIZE + len(body)
            if offset + rec_len > self.size_limit and offset > LOG_HEADER_SIZE:
                self._write_at(parts, start)
                self._offset = offset
                self._add_ledger_bytes(ledger_id, appended)
                self._finish_current()
                self._open_new()
                parts, start, offset, appended = [], self._offset, self._offset, 0
            parts.append(pack_rec(rec_len - 4, ledger_id, entry_id, crc))
            parts.append(body)
            keys.append(pack_key(ledger_id, entry_id))
            locations.append(pack_loc(self.current_id, offset, len(body)))
            offset += rec_len
            appended += rec_len
        self._write_at(parts, start)
        self._offset = offset
        self._add_ledger_bytes(ledger_id, appended)
        return keys, locations

    def _append_fitting(
        self,
        ledger_id: int,
        entry_ids: Sequence[int],
        chunk: list[bytes],
        sizes: list[int],
        start: int,
        total: int,
        crcs: Mapping[int, int] | None,
    ) -> tuple[list[bytes], list[bytes]]:
        """:meth:`append` of entries that all fit in the current log, in one C-level pass per
        field (CRCs, headers, keys, locations) instead of a chain of calls per entry: the same
        bytes, at a fraction of the flush thread's time under the GIL."""
        count = len(sizes)
        parts: list[bytes] = [b""] * (2 * count)
        parts[0::2] = list(
            map(
                RECORD_HEADER.pack,
                map(_RECORD_SIZE_AFTER_SIZE_FIELD.__add__, sizes),
                repeat(ledger_id, count),
                entry_ids,
                _body_crcs(entry_ids, chunk, crcs),
            )
        )
        parts[1::2] = chunk
        offsets = accumulate([RECORD_HEADER_SIZE + size for size in sizes[:-1]], initial=start)
        keys = list(map(_KEY.pack, repeat(ledger_id, count), entry_ids))
        locations = list(map(LOCATION.pack, repeat(self.current_id, count), offsets, sizes))
        self._write_at(parts, start)
        self._offset = start + total
        self._add_ledger_bytes(ledger_id, total)
        return keys, locations

    def _add_ledger_bytes(self, ledger_id: int, nbytes: int) -> None:
        if nbytes:
            self._ledger_bytes[ledger_id] = self._ledger_bytes.get(ledger_id, 0) + nbytes

    def _write_at(self, parts: list[bytes], offset: int) -> None:
        if parts:
            data = b"".join(parts)
            pwrite_all(self._fd, data, offset)
            start_write_behind(self._fd, offset, len(data))  # see write_behind: no burst at the fsync

    def sync(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)
            if self.page_cache_keep >= 0:
                self._drop_synced_pages(self._offset - self.page_cache_keep)

    def _drop_synced_pages(self, below: int) -> None:
        """Pages of the open log before ``below`` (down to a whole step) leave the page cache.
        Called right after a sync, so they are clean and DONTNEED really drops them."""
        upto = below // _DROP_STEP * _DROP_STEP
        if upto > self._uncached_below:
            start = self._uncached_below
            os.posix_fadvise(self._fd, start, upto - start, os.POSIX_FADV_DONTNEED)
            self._uncached_below = upto

    def close(self) -> None:
        self._finish_current()
        with self._readers_lock:
            self._closed = True
            to_close = [self._retire(reader) for reader in self._readers.values()]
            self._readers.clear()
        _close_fds(to_close)

    # ---- reading (worker threads) -----------------------------------------------------------

    def _acquire(self, log_id: int) -> _Reader:
        evicted = None
        with self._readers_lock:
            if self._closed:
                raise ValueError(f"entry logger of {self.directory} is closed")
            reader = self._readers.get(log_id)
            if reader is not None:
                self._readers.move_to_end(log_id)
            else:
                fd = os.open(self.directory / log_name(log_id), os.O_RDONLY)
                reader = self._readers[log_id] = _Reader(fd)
                if len(self._readers) > _MAX_OPEN_READERS:
                    evicted = self._retire(self._readers.popitem(last=False)[1])
            reader.users += 1
        _close_fds([evicted])
        return reader

    def _release(self, reader: _Reader) -> None:
        with self._readers_lock:
            reader.users -= 1
            last = reader.retired and not reader.users
        if last:
            os.close(reader.fd)

    @staticmethod
    def _retire(reader: _Reader) -> int | None:
        """Drop a reader from use (under the lock); returns its fd when no ``pread`` holds it
        and the caller must close it, after releasing the lock: closing a deleted log's last fd
        frees its blocks, which may take a while. Closing under a running ``pread`` could let
        ``open`` hand the number to another file, so a reader in use is closed by its last user."""
        reader.retired = True
        return None if reader.users else reader.fd

    def read_span(self, log_id: int, offset: int, length: int) -> bytes:
        reader = self._acquire(log_id)
        try:
            return os.pread(reader.fd, length, offset)
        finally:
            self._release(reader)

    @staticmethod
    def decode(data: bytes | memoryview, pos: int, ledger_id: int, entry_id: int, body_len: int) -> bytes:
        """The body of the record at ``pos`` of ``data``, checked against its ids and CRC."""
        if len(data) < pos + RECORD_HEADER_SIZE + body_len:
            raise CorruptEntryError(f"entry {ledger_id}/{entry_id}: short read")
        size, led, ent, crc = RECORD_HEADER.unpack_from(data, pos)
        body = bytes(data[pos + RECORD_HEADER_SIZE : pos + RECORD_HEADER_SIZE + body_len])
        if size != body_len + RECORD_HEADER_SIZE - 4 or led != ledger_id or ent != entry_id:
            raise CorruptEntryError(f"entry {ledger_id}/{entry_id}: record header mismatch")
        if crc32c.crc32c(body) != crc:
            raise CorruptEntryError(f"entry {ledger_id}/{entry_id}: checksum mismatch")
        return body

    # ---- garbage collection (under the ledger directory's lock) ----------------------------

    def finished_log_ids(self) -> list[int]:
        """Every log on disk but the one being appended to, ascending: none of them changes again."""
        ids = (parse_log_name(p.name) for p in self.directory.iterdir())
        return sorted(i for i in ids if i is not None and i != self.current_id)

    def ledger_map(self, log_id: int) -> dict[int, int]:
        """Bytes per ledger in a finished log: its persisted map, or a scan of its records when
        a crash kept the map from being written (BookKeeper's extractEntryLogMetadataByScanning).
        ``CorruptEntryError`` if the records do not add up."""
        persisted = self.read_ledger_map(log_id)
        return persisted if persisted is not None else self.scan_ledger_map(log_id)

    def scan_ledger_map(self, log_id: int) -> dict[int, int]:
        usage: dict[int, int] = {}
        for _offset, ledger_id, _entry_id, body_len in self.iter_records(log_id):
            usage[ledger_id] = usage.get(ledger_id, 0) + RECORD_HEADER_SIZE + body_len
        return usage

    def iter_records(self, log_id: int) -> Iterator[tuple[int, int, int, int]]:
        """(offset, ledger id, entry id, body length) of each record of a finished log.

        A log with a ledger map was closed cleanly: its records must fill the space up to the
        map exactly. A log without one was current when the bookie crashed: its walk may end at a
        torn tail, i.e. zeros (pages the crash lost), or one last record cut short by the end of
        the file. Anything else that stops a walk raises ``CorruptEntryError``: a damaged size
        field must never pass for the end of a log, or the records after it would be taken for
        garbage. A file too short for a header holds no record."""
        with open(self.directory / log_name(log_id), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            header = f.read(LOG_HEADER_SIZE)
            if len(header) < LOG_HEADER.size:
                return
            magic, _version, _lid, map_offset, _count = LOG_HEADER.unpack_from(header)
            mapped = magic == LOG_MAGIC and LOG_HEADER_SIZE <= map_offset <= size
            end = map_offset if mapped else size
            offset = LOG_HEADER_SIZE
            while offset + RECORD_HEADER_SIZE <= end:
                f.seek(offset)
                record_size, ledger_id, entry_id, _crc = RECORD_HEADER.unpack(f.read(RECORD_HEADER_SIZE))
                record = 4 + record_size
                if record_size < RECORD_HEADER_SIZE - 4 or ledger_id < 0 or offset + record > end:
                    break
                yield offset, ledger_id, entry_id, record - RECORD_HEADER_SIZE
                offset += record
            if offset != end and (mapped or not _torn_tail(f, offset, end)):
                where = f"before its ledger map at {end}" if mapped else f"of {end} bytes, not a torn tail"
                raise CorruptEntryError(
                    f"entry log {log_id:x}: unreadable record at offset {offset}, {where}"
                )

    def log_size(self, log_id: int) -> int:
        return (self.directory / log_name(log_id)).stat().st_size

    def delete_log(self, log_id: int) -> None:
        """Remove a finished log whose entries are all garbage, durably (directory fsynced)."""
        if log_id == self.current_id:
            raise ValueError(f"entry log {log_id} is still being written")
        # unlink first: a read after it cannot reopen the file and cache a reader nobody retires
        (self.directory / log_name(log_id)).unlink()
        with self._readers_lock:
            reader = self._readers.pop(log_id, None)
            fd = self._retire(reader) if reader is not None else None
        _close_fds([fd])  # the space is freed when the last pread lets go
        fsync_dir(self.directory)

    def read_ledger_map(self, log_id: int) -> dict[int, int] | None:
        """The persisted ledger -> bytes map of a finished log; None if it has none (the log was
        current at a crash) or it does not check out: the records fill the space between the
        header and the map exactly, so the sizes must add up to it."""
        with open(self.directory / log_name(log_id), "rb") as f:
            header = f.read(LOG_HEADER_SIZE)
            if len(header) < LOG_HEADER.size:
                return None
            magic, _version, _lid, map_offset, count = LOG_HEADER.unpack_from(header)
            if magic != LOG_MAGIC or map_offset < LOG_HEADER_SIZE:
                return None
            f.seek(map_offset)
            raw = f.read(count * MAP_ITEM.size)
        if len(raw) != count * MAP_ITEM.size:
            return None
        items = list(MAP_ITEM.iter_unpack(raw))
        if any(ledger_id < 0 or n <= 0 for ledger_id, n in items):
            return None
        if sum(n for _, n in items) != map_offset - LOG_HEADER_SIZE:
            return None
        return dict(items)


def _torn_tail(f: BinaryIO, offset: int, end: int) -> bool:
    """Whether ``[offset, end)`` of a log left by a crash looks like what a crash leaves: less
    than a record header, one record (of at most an entry's size) running past the end, or
    zeros only."""
    if end - offset < RECORD_HEADER_SIZE:
        return True
    f.seek(offset)
    record_size = RECORD_HEADER.unpack(f.read(RECORD_HEADER_SIZE))[0]
    if RECORD_HEADER_SIZE - 4 <= record_size <= _MAX_RECORD_SIZE and offset + 4 + record_size > end:
        return True
    f.seek(offset)
    while chunk := f.read(min(1 << 20, end - f.tell())):
        if chunk.count(0) != len(chunk):
            return False
    return True


def _close_fds(fds: Iterable[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


@dataclass
class _Reader:
    """A cached read fd and the ``pread`` calls using it right now."""

    fd: int
    users: int = 0
    retired: bool = False


_KEY = struct.Struct(">qq")
