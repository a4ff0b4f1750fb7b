"""Journal file and record layout.

A journal file starts with a 512-byte header (magic, version, journal id) and is preallocated with
zeros. Each record is ``[payloadLength:4][crc32c:4][type:1][payload]``; the CRC32C covers the type
byte and the payload, so a torn tail (short read, zero fill) or a flipped byte is detected and
replay stops before it. A zero length with type 0 is the untouched preallocated area.

Payloads: ENTRY = entry body (its 32-byte header names ledger and entry); MASTER_KEY = ledgerId(8)
|| key; FENCE = ledgerId(8); EXPLICIT_LAC = ledgerId(8) || lac(8) || LAC body.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from enum import IntEnum
from itertools import repeat
from operator import xor
from pathlib import Path
from typing import cast

import crc32c

from bkproto.entry_format import LAC_HEADER

from .api import LedgerUpdate, UpdateKind

FILE_MAGIC = b"PBKJ"
FILE_VERSION = 1
FILE_HEADER = struct.Struct(">4sIQ")
FILE_HEADER_SIZE = 512
RECORD_HEADER = struct.Struct(">IIB")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 9
MAX_PAYLOAD = 64 * 1024 * 1024
LEDGER_ID = struct.Struct(">q")
LEDGER_LAC = struct.Struct(">qq")


class RecordType(IntEnum):
    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4


# CRC state after the type byte, so the per-record CRC is one call over the payload.
_TYPE_SEED = {t: crc32c.crc32c(bytes([t])) for t in RecordType}
_ENTRY_SEED = _TYPE_SEED[RecordType.ENTRY]
_ENTRY_TYPE = int(RecordType.ENTRY)  # packing a plain int skips the enum's __index__ per entry
_pack_header = RECORD_HEADER.pack
_crc = crc32c.crc32c


def file_name(journal_id: int) -> str:
    return f"{journal_id:016x}.txn"


def parse_file_name(name: str) -> int | None:
    if not name.endswith(".txn"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


def file_ids(directory: Path) -> list[int]:
    """The ids of the journal files in ``directory``, oldest first."""
    ids = (parse_file_name(p.name) for p in directory.iterdir())
    return sorted(i for i in ids if i is not None)


def file_header(journal_id: int) -> bytes:
    return FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, journal_id).ljust(FILE_HEADER_SIZE, b"\0")


def entry_record_header(body: bytes) -> bytes:
    """Header of an ENTRY record; the body itself follows unchanged (no copy)."""
    return _pack_header(len(body), _crc(body, _ENTRY_SEED), _ENTRY_TYPE)


def entry_records(bodies: list[bytes]) -> tuple[list[bytes], int, list[int]]:
    """The ENTRY records of a batch as journal parts, each record's header then its body
    (unchanged, not copied), their size in bytes, and each body's own CRC32C (unseeded: what
    the entry log's record of the entry carries, so the flush need not compute it again).

    Byte for byte the records :func:`entry_record_header` makes, with one CRC pass per body
    instead of two: CRC32C is affine in its starting state, so the record's CRC (seeded with the
    type byte) is the body's CRC XOR a constant that depends only on the body's length
    (:data:`_ENTRY_SHIFTS`). All in C-level passes over the batch (the add path's per-entry work
    is what its throughput is made of)."""
    sizes = list(map(len, bodies))
    crcs = list(map(_crc, bodies))
    shifts: list[int | None] = list(map(_ENTRY_SHIFTS.get, sizes))
    if None in shifts:
        _learn_shifts(bodies, sizes, crcs, shifts)
    parts: list[bytes] = [b""] * (2 * len(bodies))
    parts[0::2] = list(map(_pack_header, sizes, map(xor, crcs, cast(list[int], shifts)), repeat(_ENTRY_TYPE)))
    parts[1::2] = bodies
    return parts, sum(sizes) + RECORD_HEADER_SIZE * len(bodies), crcs


# Body length -> the XOR that turns a body's CRC32C into its ENTRY record's. Any body of that
# length gives it (crc(seed, b) ^ crc(0, b) does not depend on b's bytes), so each length is
# learnt from the first body that has it, at the cost the record had before. Bounded: emptied
# when full (entry sizes are usually few).
_ENTRY_SHIFTS: dict[int, int] = {}
_MAX_ENTRY_SHIFTS = 4096


def _learn_shifts(bodies: list[bytes], sizes: list[int], crcs: list[int], shifts: list[int | None]) -> None:
    """Fill the ``None``s of ``shifts``, learning each new length's shift from its body."""
    for index, known in enumerate(shifts):
        if known is None:
            size = sizes[index]
            shift = _ENTRY_SHIFTS.get(size)
            if shift is None:
                shift = _crc(bodies[index], _ENTRY_SEED) ^ crcs[index]
                if len(_ENTRY_SHIFTS) >= _MAX_ENTRY_SHIFTS:
                    _ENTRY_SHIFTS.clear()
                _ENTRY_SHIFTS[size] = shift
            shifts[index] = shift


def record(record_type: RecordType, payload: bytes) -> bytes:
    return _pack_header(len(payload), _crc(payload, _TYPE_SEED[record_type]), record_type) + payload


def master_key_record(ledger_id: int, master_key: bytes) -> bytes:
    return record(RecordType.MASTER_KEY, LEDGER_ID.pack(ledger_id) + master_key)


def fence_record(ledger_id: int) -> bytes:
    return record(RecordType.FENCE, LEDGER_ID.pack(ledger_id))


def explicit_lac_record(ledger_id: int, lac: int, body: bytes) -> bytes:
    return record(RecordType.EXPLICIT_LAC, LEDGER_LAC.pack(ledger_id, lac) + body)


def update_record(update: LedgerUpdate) -> bytes:
    """The journal record of a ledger-record change."""
    if update.kind is UpdateKind.MASTER_KEY:
        return master_key_record(update.ledger_id, update.value)
    if update.kind is UpdateKind.FENCE:
        return fence_record(update.ledger_id)
    lac = LAC_HEADER.unpack_from(update.value)[1]
    return explicit_lac_record(update.ledger_id, lac, update.value)


def record_update(rtype: RecordType, payload: memoryview) -> LedgerUpdate:
    """The ledger-record change a MASTER_KEY, FENCE or EXPLICIT_LAC record holds."""
    ledger_id = LEDGER_ID.unpack_from(payload)[0]
    if rtype is RecordType.MASTER_KEY:
        return LedgerUpdate(ledger_id, UpdateKind.MASTER_KEY, bytes(payload[LEDGER_ID.size :]))
    if rtype is RecordType.FENCE:
        return LedgerUpdate(ledger_id, UpdateKind.FENCE)
    return LedgerUpdate(ledger_id, UpdateKind.EXPLICIT_LAC, bytes(payload[LEDGER_LAC.size :]))


def check_file_header(data: bytes, journal_id: int) -> bool:
    if len(data) < FILE_HEADER_SIZE:
        return False
    magic, version, jid = FILE_HEADER.unpack_from(data)
    return bool(magic == FILE_MAGIC and version == FILE_VERSION and jid == journal_id)


class ScanEnd(IntEnum):
    CLEAN = 0  # reached the zero-filled preallocated area or the exact end of the file
    TORN = 1  # a record runs past the end of the file
    CORRUPT = 2  # bad type, absurd length or CRC mismatch


def scan_records(data: bytes, start: int) -> Iterator[tuple[RecordType, memoryview, int]]:
    """(type, payload, offset after the record) for each valid record from ``start``.

    Stops silently at the first record that is not valid; :func:`scan_end` says why.
    """
    view = memoryview(data)
    offset = start
    size = len(data)
    while offset + RECORD_HEADER_SIZE <= size:
        length, crc, rtype = RECORD_HEADER.unpack_from(data, offset)
        if rtype not in _TYPE_SEED or length > MAX_PAYLOAD:
            return
        end = offset + RECORD_HEADER_SIZE + length
        if end > size:
            return
        payload = view[offset + RECORD_HEADER_SIZE : end]
        if _crc(payload, _TYPE_SEED[rtype]) != crc:
            return
        yield RecordType(rtype), payload, end
        offset = end


def scan_end(data: bytes, offset: int) -> ScanEnd:
    """Why scanning stopped at ``offset``."""
    if offset + RECORD_HEADER_SIZE > len(data):
        return ScanEnd.CLEAN if not any(data[offset:]) else ScanEnd.TORN
    length, crc, rtype = RECORD_HEADER.unpack_from(data, offset)
    if length == 0 and crc == 0 and rtype == 0:
        return ScanEnd.CLEAN
    if rtype in _TYPE_SEED and length <= MAX_PAYLOAD and offset + RECORD_HEADER_SIZE + length > len(data):
        return ScanEnd.TORN
    return ScanEnd.CORRUPT


# Bytes read at a time: the largest record fits, so a window only ever cuts a record at its end.
WINDOW = MAX_PAYLOAD + RECORD_HEADER_SIZE + (1 << 20)


class FileRecords:
    """The valid records of one journal file from ``start``, read a window at a time: a file
    grows to journalMaxSizeMB (2 GiB) before it rolls, and read whole at every restart it cost
    that much memory. After iterating, :attr:`end` and :attr:`why` say where and why it stopped.
    A read error is an OSError (a mapped file would have killed the process with SIGBUS)."""

    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        self.start = start
        self.end = start
        self.why = ScanEnd.CLEAN

    def header(self) -> bytes:
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), FILE_HEADER_SIZE, 0)

    def __iter__(self) -> Iterator[tuple[RecordType, memoryview, int]]:
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pos = self.start
            while True:
                data = os.pread(f.fileno(), max(0, min(WINDOW, size - pos)), pos)
                stop = 0
                for rtype, payload, end in scan_records(data, 0):
                    yield rtype, payload, pos + end
                    stop = end
                why = scan_end(data, stop)
                if why is ScanEnd.TORN and stop > 0 and pos + len(data) < size:
                    pos += stop  # the window cut a record: read on from it
                    continue
                self.end, self.why = pos + stop, why
                return
