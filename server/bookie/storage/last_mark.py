"""LastLogMark: the journal position before which everything is in entry logs and indexes.

Persisted in every ledger dir, one file per journal (journal id and offset, 16 bytes, like
BookKeeper): ``lastMark`` when the bookie has one journal dir, ``lastMark.<index>`` for journal
``index`` when it has several (BookKeeper's names). Written atomically: temp file, fsync, rename,
fsync the directory. Start-up takes the smallest mark found (a crash between two dirs leaves the
older one, which only means replaying a bit more).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

from bookie.api import LogMark

from .fileio import replace_atomically

MARK = struct.Struct(">qq")
MARK_FILE = "lastMark"


def mark_order(mark: LogMark) -> tuple[int, int]:
    return (mark.journal_id, mark.offset)


def mark_file_name(journal_index: int, journal_count: int) -> str:
    """The mark file of journal ``journal_index`` of ``journal_count``."""
    return MARK_FILE if journal_count == 1 else f"{MARK_FILE}.{journal_index}"


def write_mark(dirs: Sequence[Path], mark: LogMark, name: str) -> None:
    data = MARK.pack(mark.journal_id, mark.offset)
    for directory in dirs:
        replace_atomically(directory / name, data)


def mark_files(directory: Path) -> list[Path]:
    """The mark files a bookie keeps in ``directory`` (one per journal, and any left-over .tmp):
    what a format must remove with ``current/``, or the next start would skip the new journal."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name == MARK_FILE or p.name.startswith(f"{MARK_FILE}."))


def read_mark(dirs: Sequence[Path], name: str) -> LogMark:
    marks = []
    for directory in dirs:
        path = directory / name
        if path.exists():
            raw = path.read_bytes()
            if len(raw) == MARK.size:
                marks.append(LogMark(*MARK.unpack(raw)))
    if len(marks) < len(dirs):
        return LogMark(0, 0)  # a dir without a mark (new or damaged): replay the whole journal
    return min(marks, key=mark_order)
