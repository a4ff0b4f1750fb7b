"""The read-ahead cache: a FIFO ring bounded by bytes (``dbStorage_readAheadCacheMaxSizeMb``).

Filled with the entries read ahead after a miss; oldest entries drop out first. Loop only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable


class ReadCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self._entries.get((ledger_id, entry_id))

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        if len(body) > self.max_bytes:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._entries[key] = body
        self.size += len(body)
        while self.size > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.size -= len(dropped)

    def put_run(self, ledger_id: int, run: Iterable[tuple[int, bytes]]) -> None:
        """:meth:`put` of each ``(entry id, body)`` of a read-ahead run, evicting once at the end."""
        entries = self._entries
        size = self.size
        for entry_id, body in run:
            if len(body) > self.max_bytes:
                continue
            key = (ledger_id, entry_id)
            old = entries.pop(key, None)
            if old is not None:
                size -= len(old)
            entries[key] = body
            size += len(body)
        while size > self.max_bytes:
            _, dropped = entries.popitem(last=False)
            size -= len(dropped)
        self.size = size

    def drop_ledgers(self, ledger_ids: Collection[int]) -> None:
        """One pass over the cache, however many ledgers (garbage collection deletes many)."""
        wanted = set(ledger_ids)
        for key in [k for k in self._entries if k[0] in wanted]:
            self.size -= len(self._entries.pop(key))
