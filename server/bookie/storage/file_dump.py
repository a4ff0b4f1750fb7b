"""Record-by-record readers of a bookie's journal files and entry logs, for the shell's
``readjournal``, ``readlog`` and ``readlogmetadata`` (BookKeeper's commands of those names).
They read files only, never an index, so they also work on a copy taken off a broken machine.

An entry's ``data`` is its body after the 32-byte entry header: the digest, then the payload
(which digest, and so where the payload starts, is in the ledger's metadata, not in the file).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bkproto.entry_format import HEADER, HEADER_SIZE

from .entry_logger import RECORD_HEADER_SIZE, CorruptEntryError, EntryLogger, parse_log_name
from .journal_format import (
    FILE_HEADER,
    FILE_HEADER_SIZE,
    FILE_MAGIC,
    LEDGER_ID,
    LEDGER_LAC,
    FileRecords,
    RecordType,
    parse_file_name,
)
from .journal_format import RECORD_HEADER_SIZE as JOURNAL_RECORD_HEADER_SIZE
from .ledger_directory import CURRENT


class RecordKind(enum.Enum):
    ENTRY = "entry"
    MASTER_KEY = "master_key"
    FENCE = "fence"
    EXPLICIT_LAC = "explicit_lac"


@dataclass
class DumpedRecord:
    kind: RecordKind
    offset: int  # where the record starts in its file
    ledger_id: int
    entry_id: int | None = None
    size: int = 0  # an entry's body bytes; the record's payload bytes otherwise
    last_add_confirmed: int | None = None  # an entry's header LAC, or the explicit LAC
    data: bytes = b""  # entry: digest + payload; master key; explicit LAC: its digest and body
    problem: str | None = None  # an entry log record whose body does not check out


class JournalDump:
    """The records of one journal file, in order, up to the first that is not valid;
    :attr:`end_offset` and :attr:`end_reason` say where and why reading stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records = FileRecords(path, FILE_HEADER_SIZE)  # read a window at a time
        header = self._records.header()
        if len(header) < FILE_HEADER_SIZE:
            raise ValueError(f"{path}: {len(header)} bytes, too short for a journal file header")
        magic, _version, self.journal_id = FILE_HEADER.unpack_from(header)
        if magic != FILE_MAGIC:
            raise ValueError(f"{path}: not a journal file (magic {magic!r})")

    @property
    def end_offset(self) -> int:
        return self._records.end

    @property
    def end_reason(self) -> str:
        return self._records.why.name.lower()

    def records(self) -> Iterator[DumpedRecord]:
        for rtype, payload, end in self._records:
            yield _journal_record(rtype, bytes(payload), end - JOURNAL_RECORD_HEADER_SIZE - len(payload))


def _journal_record(rtype: RecordType, payload: bytes, offset: int) -> DumpedRecord:
    if rtype is RecordType.ENTRY:
        ledger_id, entry_id, lac, _length = HEADER.unpack_from(payload)
        return DumpedRecord(RecordKind.ENTRY, offset, ledger_id, entry_id, len(payload), lac,
                            payload[HEADER_SIZE:])
    (ledger_id,) = LEDGER_ID.unpack_from(payload)
    if rtype is RecordType.MASTER_KEY:
        return DumpedRecord(RecordKind.MASTER_KEY, offset, ledger_id, size=len(payload),
                            data=payload[LEDGER_ID.size:])
    if rtype is RecordType.FENCE:
        return DumpedRecord(RecordKind.FENCE, offset, ledger_id, size=len(payload))
    _ledger, lac = LEDGER_LAC.unpack_from(payload)
    return DumpedRecord(RecordKind.EXPLICIT_LAC, offset, ledger_id, size=len(payload),
                        last_add_confirmed=lac, data=payload[LEDGER_LAC.size:])


class EntryLogDump:
    """The records of one entry log, checked one by one (ids and CRC32C)."""

    def __init__(self, path: Path) -> None:
        log_id = parse_log_name(path.name)
        if log_id is None or not path.is_file():
            raise ValueError(f"{path}: not an entry log (<hex id>.log)")
        self.path = path
        self.log_id = log_id
        self._logger = EntryLogger(path.parent, size_limit=0)

    def records(self, with_data: bool = False) -> Iterator[DumpedRecord]:
        """``CorruptEntryError`` once a record cannot be walked past (after what came before)."""
        for offset, ledger_id, entry_id, length in self._logger.iter_records(self.log_id):
            record = self._logger.read_span(self.log_id, offset, RECORD_HEADER_SIZE + length)
            try:
                body = EntryLogger.decode(record, 0, ledger_id, entry_id, length)
            except CorruptEntryError as exc:
                yield DumpedRecord(RecordKind.ENTRY, offset, ledger_id, entry_id, length, problem=str(exc))
                continue
            lac = HEADER.unpack_from(body)[2] if length >= HEADER_SIZE else None
            yield DumpedRecord(RecordKind.ENTRY, offset, ledger_id, entry_id, length, lac,
                               body[HEADER_SIZE:] if with_data else b"")

    def ledger_map(self) -> tuple[dict[int, int], bool]:
        """Bytes per ledger, and whether they come from the map the log was closed with (else
        from a scan of its records: the log was being written at a crash, or is still)."""
        persisted = self._logger.read_ledger_map(self.log_id)
        if persisted is not None:
            return persisted, True
        return self._logger.scan_ledger_map(self.log_id), False

    def close(self) -> None:
        self._logger.close()


def find_file(dirs: list[Path], name_or_id: str, suffix: str) -> Path:
    """A file given by path, or by its hex id in the ``current/`` of one of ``dirs``.
    ``ValueError`` naming what was looked for when it is nowhere or in several dirs."""
    given = Path(name_or_id)
    if given.is_file():
        return given
    try:
        file_id = int(name_or_id.removesuffix(suffix), 16)
    except ValueError:
        raise ValueError(f"{name_or_id!r} is neither a file nor a hex id") from None
    parse = parse_file_name if suffix == ".txn" else parse_log_name
    found = [
        p for d in dirs if (d / CURRENT).is_dir()
        for p in (d / CURRENT).iterdir() if parse(p.name) == file_id
    ]  # fmt: skip
    if len(found) != 1:
        where = ", ".join(str(d / CURRENT) for d in dirs)
        what = "no" if not found else "more than one"
        raise ValueError(f"{what} {suffix} file with id {file_id:x} in {where}: give its path")
    return found[0]
