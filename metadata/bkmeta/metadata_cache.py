"""`WatchedMetadataCache`: ledger metadata read once from ZooKeeper, kept while a watch says it
has not changed.

An entry exists only while the ZooKeeper data watch set by the read that filled it has not fired:
the first event for the ledger (changed, deleted, or a connection-state event) drops it, and so
do a disconnection (kazoo does not re-register watches after a reconnect, so they may be gone),
a version conflict or a write of our own. A cached read is therefore as fresh as a read from the
ZooKeeper server this session talks to, give or take the time an event takes to reach the event
loop: what ZooKeeper itself promises a client without ``sync``.

Race the cache closes: a read's response and the event of the watch that read set reach the loop
by different paths, the event possibly first. Each ledger has an invalidation count; a read notes
it before sending and fills the cache only if no event (nor disconnection) came in between.

Bounded: at most ``capacity`` ledgers are cached (and watched on the server); past that, reads
are served fresh and not cached. ZooKeeper (through kazoo) cannot remove a watch, so an entry
leaves only through an event: a long-lived client that reads more distinct unchanging ledgers
than ``capacity`` caches the first ones only.
"""

from __future__ import annotations

import logging
from collections import Counter

from bkmeta.layout import BadLedgerPathError, ZkLayout
from bkmeta.model import LedgerMetadata, Versioned
from bkmeta.store import MetadataStore, SessionEvent, Watcher, WatchEvent

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 10_000


class WatchedMetadataCache:
    """Ledger id -> the metadata last read with a watch that has not fired since."""

    def __init__(self, zk: MetadataStore, layout: ZkLayout, capacity: int = DEFAULT_CAPACITY) -> None:
        self._layout = layout
        self._capacity = capacity
        self._entries: dict[int, Versioned[LedgerMetadata]] = {}
        self._invalidations: Counter[int] = Counter()  # per ledger, only while a read is in flight
        self._reads_in_flight: Counter[int] = Counter()
        self._epoch = 0  # bumped on disconnection: every read in flight is then untrusted
        self._closed = False
        self._zk = zk
        self._watcher: Watcher | None = None
        self.hits = 0
        self.misses = 0

    @property
    def watcher(self) -> Watcher:
        """The one watcher of every cached path (kazoo keeps one registration per path and
        watcher); made on first use, when the store's event loop is known."""
        if self._watcher is None:
            self._watcher = self._zk.wrap_watcher(self._on_watch_event)
        return self._watcher

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        found = self._entries.get(ledger_id)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def peek(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        """The entry, without counting a hit or a miss."""
        return self._entries.get(ledger_id)

    def begin_read(self, ledger_id: int) -> tuple[int, int] | None:
        """Before a ZooKeeper read: a ticket for :meth:`fill` if the read should set the cache's
        watch, or None when the cache is full (read plainly then)."""
        if self._closed or len(self._entries) + len(self._reads_in_flight) >= self._capacity:
            return None
        self._reads_in_flight[ledger_id] += 1
        return self._epoch, self._invalidations[ledger_id]

    def fill(self, ledger_id: int, ticket: tuple[int, int], value: Versioned[LedgerMetadata] | None) -> None:
        """After the read of ``ticket`` (``value`` None if it failed or found no ledger)."""
        epoch, invalidations = ticket
        fresh = epoch == self._epoch and invalidations == self._invalidations[ledger_id]
        self._reads_in_flight[ledger_id] -= 1
        if self._reads_in_flight[ledger_id] <= 0:
            del self._reads_in_flight[ledger_id]
            self._invalidations.pop(ledger_id, None)
        if value is None or not fresh or self._closed:
            return
        current = self._entries.get(ledger_id)
        if current is None or current.version <= value.version:
            self._entries[ledger_id] = value

    def invalidate(self, ledger_id: int) -> None:
        self._entries.pop(ledger_id, None)
        if ledger_id in self._reads_in_flight:
            self._invalidations[ledger_id] += 1

    def on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.DISCONNECTED, SessionEvent.EXPIRED):
            self._drop_all()

    def close(self) -> None:
        self._closed = True
        self._drop_all()

    def _drop_all(self) -> None:
        self._entries.clear()
        self._epoch += 1

    def _on_watch_event(self, event: WatchEvent) -> None:
        if event.path is None:  # a connection-state event: every watch may be gone
            self._drop_all()
            return
        try:
            ledger_id = self._layout.parse_ledger(event.path)
        except BadLedgerPathError:
            log.debug("watch event for a non-ledger path %s", event.path)
            return
        self.invalidate(ledger_id)
