"""Write failures of the storage, for the bookie's state manager (which turns the bookie read-only
while they last, so clients take their writes elsewhere instead of retrying into an error).

- A journal that failed stays failed: its file may end in a torn record, and BookKeeper shuts the
  bookie down on a journal error. Here the bookie keeps serving reads until it is restarted.
- An index (RocksDB) that failed a write stays failed too: RocksDB refuses every later write
  until it is reopened, so flushes stop (each retry would only write the entry logs again).
- A write-cache flush that failed otherwise is retried (its entries stay in the cache and in the journal);
  the failure ends with the first flush that succeeds, e.g. once garbage collection freed space.

Only the event loop changes it; listeners run there too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


class StorageHealth:
    def __init__(self) -> None:
        self.journal_failure: str | None = None
        self.index_failure: str | None = None
        self.flush_failure: str | None = None
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs after every change of either failure."""
        self._listeners.append(listener)

    def journal_failed(self, directory: Path, error: BaseException) -> None:
        if self.journal_failure is None:
            self.journal_failure = f"journal {directory}: {error}"
            self._changed()

    def index_failed(self, error: BaseException) -> None:
        if self.index_failure is None:
            self.index_failure = str(error)
            self._changed()

    def flush_failed(self, error: BaseException) -> None:
        first = self.flush_failure is None
        self.flush_failure = f"write-cache flush: {error}"
        if first:
            self._changed()

    def flush_succeeded(self) -> None:
        if self.flush_failure is not None:
            log.info("write-cache flush works again after: %s", self.flush_failure)
            self.flush_failure = None
            self._changed()

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # one listener's bug must not hide the failure from the others
                log.exception("storage health listener failed")
