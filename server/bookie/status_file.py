"""BookKeeper's ``BOOKIE_STATUS`` file (``persistBookieStatusEnabled``): where an operator's
read-only outlives a restart.

One copy in every ledger directory's ``current/``, in BookKeeper's layout-1 text:
``1,READ_ONLY,<epoch ms>`` or ``1,READ_WRITE,<epoch ms>``. Writing is best effort, one directory
at a time, so a failed disk costs only its own copy; reading takes the newest readable copy.
Each copy is replaced atomically (a temporary file, fsync, rename, fsync of the directory), so a
crash leaves the old status or the new one, never half a line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bookie.storage.fileio import replace_atomically

log = logging.getLogger(__name__)

STATUS_FILE_NAME = "BOOKIE_STATUS"
LAYOUT_VERSION = 1
_MODES = {"READ_ONLY": True, "READ_WRITE": False}


@dataclass(frozen=True)
class PersistedStatus:
    read_only: bool
    updated_ms: int  # when it was written, epoch milliseconds: the newest copy wins

    def line(self) -> str:
        mode = "READ_ONLY" if self.read_only else "READ_WRITE"
        return f"{LAYOUT_VERSION},{mode},{self.updated_ms}\n"

    @classmethod
    def parse(cls, text: str) -> PersistedStatus:
        parts = [part.strip() for part in text.strip().split(",")]
        if len(parts) != 3 or parts[0] != str(LAYOUT_VERSION) or parts[1] not in _MODES:
            raise ValueError(f"not a layout-{LAYOUT_VERSION} bookie status: {text.strip()[:80]!r}")
        return cls(_MODES[parts[1]], int(parts[2]))


class BookieStatusFiles:
    """The status copies of one bookie, one per ledger directory. Thread-safe."""

    def __init__(self, ledger_dirs: Sequence[Path]) -> None:
        if not ledger_dirs:
            raise ValueError("a bookie status needs at least one ledger directory")
        self.paths = [Path(d) / "current" / STATUS_FILE_NAME for d in ledger_dirs]
        self._lock = threading.Lock()  # one writer at a time, so the newest call's status lands last

    def read(self) -> PersistedStatus | None:
        """The newest readable copy; ``None`` when there is none (first start, or all damaged)."""
        newest: PersistedStatus | None = None
        for path in self.paths:
            try:
                status = PersistedStatus.parse(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                log.warning("ignoring the bookie status in %s: %s", path, exc)
                continue
            if newest is None or status.updated_ms > newest.updated_ms:
                newest = status
        return newest

    def write(self, read_only: bool) -> bool:
        """Write the status to every directory that takes it; returns whether any did."""
        with self._lock:
            status = PersistedStatus(read_only, int(time.time() * 1000))
            written = 0
            for path in self.paths:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    replace_atomically(path, status.line().encode())
                    written += 1
                except OSError as exc:
                    log.warning("cannot write the bookie status to %s: %s", path, exc)
            if written:
                log.info("bookie status %s persisted in %d of %d ledger directories",
                         status.line().strip(), written, len(self.paths))
            else:
                log.error("bookie status %s persisted nowhere: a restart will not keep it",
                          status.line().strip())
            return written > 0
