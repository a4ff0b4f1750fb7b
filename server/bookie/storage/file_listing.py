"""The files of a bookie's directories by kind: journal files, entry logs, and the RocksDB index
directories, each with its size. Shared by ``pybk shell listfilesondisc`` (on this host's
directories) and the HTTP admin API's ``/api/v1/bookie/list_disk_file`` (on the bookie's own)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from bookie.storage.entry_logger import parse_log_name
from bookie.storage.journal_format import parse_file_name
from bookie.storage.ledger_directory import CURRENT, LEDGERS_INDEX, LOCATIONS_INDEX

# kind -> (which dirs: "journal" or "ledger", whether a file of that dir's current/ is one)
FILE_KINDS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "journal_files": ("journal", lambda p: parse_file_name(p.name) is not None),
    "entry_logs": ("ledger", lambda p: parse_log_name(p.name) is not None),
    "index_dirs": ("ledger", lambda p: p.name in (LEDGERS_INDEX, LOCATIONS_INDEX)),
}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def disk_files(
    journal_dirs: Sequence[Path], ledger_dirs: Sequence[Path], kinds: Collection[str] = tuple(FILE_KINDS)
) -> dict[str, list[dict[str, Any]]]:
    """``{kind: [{"path", "size"}, ...]}`` for each of ``kinds`` (keys of :data:`FILE_KINDS`),
    in the order of :data:`FILE_KINDS`. Reads the file system: call it off any event loop."""
    listing: dict[str, list[dict[str, Any]]] = {}
    for kind, (which, wanted) in FILE_KINDS.items():
        if kind not in kinds:
            continue
        dirs = journal_dirs if which == "journal" else ledger_dirs
        found = [
            p for d in dirs if (d / CURRENT).is_dir()
            for p in sorted((d / CURRENT).iterdir()) if wanted(p)
        ]  # fmt: skip
        listing[kind] = [{"path": str(p), "size": _size(p)} for p in found]
    return listing
