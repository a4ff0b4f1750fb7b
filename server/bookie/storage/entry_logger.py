"""Entry logs: append-only files of entries sorted by (ledger, entry) at each flush.

Layout: a 1024-byte header ``[magic:4][version:4][logId:8][ledgerMapOffset:8][ledgerMapCount:4]``,
then records ``[size:4][ledgerId:8][entryId:8][crc32c:4][body]`` (size counts everything after the
size field; the CRC32C covers the body so a damaged entry is refused, not served). A log rolls past
``logSizeLimit``; on roll/close its ledger -> bytes map is appended and the header points at it, which
is what garbage collection reads (a log a crash left without one is scanned instead). Logs are never
appended to after a restart: a new one starts.

Appends happen on the flush thread; reads (``os.pread``) on worker threads; garbage collection
lists and deletes finished logs under the ledger directory's lock, which the flush holds too.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import crc32c

from .journal_file import fsync_dir
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
_RETIRED_FD_GRACE_S = 10.0
_MAX_RETIRED_FDS = 256


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


class EntryLogger:
    def __init__(self, directory: Path, size_limit: int) -> None:
        self.directory = directory
        self.size_limit = size_limit
        directory.mkdir(parents=True, exist_ok=True)
        ids = [i for i in (parse_log_name(p.name) for p in directory.iterdir()) if i is not None]
        self._next_id = (max(ids) + 1) if ids else 0
        self._fd = -1
        self.current_id = -1
        self._offset = 0
        self._ledger_bytes: dict[int, int] = {}
        self._readers: OrderedDict[int, int] = OrderedDict()
        self._readers_lock = threading.Lock()
        self._retired: deque[tuple[float, int]] = deque()  # (when, fd) of readers dropped from the cache

    # ---- writing (flush thread) -------------------------------------------------------------

    def _open_new(self) -> None:
        log_id = self._next_id
        self._next_id += 1
        path = self.directory / log_name(log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.pwrite(fd, LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, log_id, 0, 0).ljust(LOG_HEADER_SIZE, b"\0"), 0)
        fsync_dir(self.directory)
        self._fd, self.current_id, self._offset = fd, log_id, LOG_HEADER_SIZE
        self._ledger_bytes = {}

    def _finish_current(self) -> None:
        """Append the ledger map, point the header at it, fsync and close."""
        if self._fd < 0:
            return
        items = sorted(self._ledger_bytes.items())
        data = b"".join(MAP_ITEM.pack(led, n) for led, n in items)
        os.pwrite(self._fd, data, self._offset)
        header = LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, self.current_id, self._offset, len(items))
        os.pwrite(self._fd, header, 0)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def append(
        self, ledger_id: int, entry_ids: Sequence[int], bodies: Mapping[int, bytes]
    ) -> tuple[list[bytes], list[bytes]]:
        """Append entries ``entry_ids`` (ascending) of one ledger, bodies from ``bodies``; return
        their location-index keys and values, in the same order."""
        keys: list[bytes] = []
        locations: list[bytes] = []
        parts: list[bytes] = []
        pack_rec = RECORD_HEADER.pack
        pack_loc = LOCATION.pack
        pack_key = _KEY.pack
        crc = crc32c.crc32c
        if self._fd < 0:
            self._open_new()
        start = self._offset
        offset = start
        appended = 0
        for entry_id in entry_ids:
            body = bodies[entry_id]
            rec_len = RECORD_HEADER_SIZE + len(body)
            if offset + rec_len > self.size_limit and offset > LOG_HEADER_SIZE:
                self._write_at(parts, start)
                self._offset = offset
                self._add_ledger_bytes(ledger_id, appended)
                self._finish_current()
                self._open_new()
                parts, start, offset, appended = [], self._offset, self._offset, 0
            parts.append(pack_rec(rec_len - 4, ledger_id, entry_id, crc(body)))
            parts.append(body)
            keys.append(pack_key(ledger_id, entry_id))
            locations.append(pack_loc(self.current_id, offset, len(body)))
            offset += rec_len
            appended += rec_len
        self._write_at(parts, start)
        self._offset = offset
        self._add_ledger_bytes(ledger_id, appended)
        return keys, locations

    def _add_ledger_bytes(self, ledger_id: int, nbytes: int) -> None:
        if nbytes:
            self._ledger_bytes[ledger_id] = self._ledger_bytes.get(ledger_id, 0) + nbytes

    def _write_at(self, parts: list[bytes], offset: int) -> None:
        if parts:
            data = b"".join(parts)
            if os.pwrite(self._fd, data, offset) != len(data):
                raise OSError("short entry-log write")
            start_write_behind(self._fd, offset, len(data))  # see write_behind: no burst at the fsync

    def sync(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def close(self) -> None:
        self._finish_current()
        with self._readers_lock:
            for fd in self._readers.values():
                os.close(fd)
            self._readers.clear()
            for _, fd in self._retired:
                os.close(fd)
            self._retired.clear()

    # ---- reading (worker threads) -----------------------------------------------------------

    def _reader(self, log_id: int) -> int:
        with self._readers_lock:
            fd = self._readers.get(log_id)
            if fd is not None:
                self._readers.move_to_end(log_id)
                return fd
            fd = os.open(self.directory / log_name(log_id), os.O_RDONLY)
            self._readers[log_id] = fd
            if len(self._readers) > _MAX_OPEN_READERS:
                self._retire(self._readers.popitem(last=False)[1])
            return fd

    def _retire(self, fd: int) -> None:
        """Close a reader fd only once no ``pread`` can still be using it: another thread may
        have just taken it from the cache, and closing at once could let ``open`` hand the
        same number to another file. Under ``_readers_lock``."""
        now = time.monotonic()
        retired = self._retired
        retired.append((now, fd))
        while retired and (now - retired[0][0] > _RETIRED_FD_GRACE_S or len(retired) > _MAX_RETIRED_FDS):
            os.close(retired.popleft()[1])

    def read_span(self, log_id: int, offset: int, length: int) -> bytes:
        return os.pread(self._reader(log_id), length, offset)

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
        a crash kept the map from being written (BookKeeper's extractEntryLogMetadataByScanning)."""
        persisted = self.read_ledger_map(log_id)
        return persisted if persisted is not None else self.scan_ledger_map(log_id)

    def scan_ledger_map(self, log_id: int) -> dict[int, int]:
        usage: dict[int, int] = {}
        for _offset, ledger_id, _entry_id, body_len in self.iter_records(log_id):
            usage[ledger_id] = usage.get(ledger_id, 0) + RECORD_HEADER_SIZE + body_len
        return usage

    def iter_records(self, log_id: int) -> Iterator[tuple[int, int, int, int]]:
        """(offset, ledger id, entry id, body length) of each record of a finished log, walking
        from the header on; a torn or zeroed tail, or the ledger map, ends the walk."""
        path = self.directory / log_name(log_id)
        with open(path, "rb") as f:
            header = f.read(LOG_HEADER_SIZE)
            magic, _version, _lid, map_offset, _count = LOG_HEADER.unpack_from(header)
            end = os.fstat(f.fileno()).st_size
            if magic == LOG_MAGIC and map_offset:
                end = min(end, map_offset)
            offset = LOG_HEADER_SIZE
            while offset + RECORD_HEADER_SIZE <= end:
                f.seek(offset)
                size, ledger_id, entry_id, _crc = RECORD_HEADER.unpack(f.read(RECORD_HEADER_SIZE))
                record = 4 + size
                if size < RECORD_HEADER_SIZE - 4 or ledger_id < 0 or offset + record > end:
                    return
                yield offset, ledger_id, entry_id, record - RECORD_HEADER_SIZE
                offset += record

    def log_size(self, log_id: int) -> int:
        return (self.directory / log_name(log_id)).stat().st_size

    def delete_log(self, log_id: int) -> None:
        """Remove a finished log whose entries are all garbage, durably (directory fsynced)."""
        if log_id == self.current_id:
            raise ValueError(f"entry log {log_id} is still being written")
        with self._readers_lock:
            fd = self._readers.pop(log_id, None)
            if fd is not None:
                self._retire(fd)
        (self.directory / log_name(log_id)).unlink()
        fsync_dir(self.directory)

    def read_ledger_map(self, log_id: int) -> dict[int, int] | None:
        """The persisted ledger -> bytes map of a finished log (None if still open / crashed)."""
        data = self.read_span(log_id, 0, LOG_HEADER_SIZE)
        magic, _version, _lid, map_offset, count = LOG_HEADER.unpack_from(data)
        if magic != LOG_MAGIC or map_offset == 0:
            return None
        raw = self.read_span(log_id, map_offset, count * MAP_ITEM.size)
        return dict(MAP_ITEM.iter_unpack(raw))


_KEY = struct.Struct(">qq")
