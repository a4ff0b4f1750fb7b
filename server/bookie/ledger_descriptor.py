"""What the bookie core knows of each ledger between requests: its descriptor.

A descriptor is the core's view of a ledger's :class:`~bookie.storage.api.LedgerRecord` (master
key, fenced, explicit LAC) plus the LAC it has seen, loaded from the storage once and then kept
in step by the core, which writes every change through the storage. The cache of descriptors is
bounded: a descriptor dropped from it reloads from the storage.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bkproto.entry_format import HEADER, LAC_HEADER
from bookie.storage.api import LedgerStorage

MAX_CACHED_LEDGERS = 100_000


@dataclass(slots=True)
class LedgerDescriptor:
    master_key: bytes
    fenced: bool = False
    explicit_lac_body: bytes | None = None
    lac: int = -1  # max of the piggybacked LACs and the explicit one
    lac_ts: int = 0  # ms since the epoch of the last LAC increase (0: none since loading)


class LedgerDescriptors:
    """The descriptors of the ledgers the core has touched, by ledger id (event loop only)."""

    def __init__(self, storage: LedgerStorage, max_cached: int = MAX_CACHED_LEDGERS) -> None:
        self._storage = storage
        self._max_cached = max_cached
        # read directly on the add path: a dict lookup, no call
        self.cached: dict[int, LedgerDescriptor] = {}
        # Ledgers garbage collection is deleting right now: nothing may load or re-create them
        # until it is done, or an add accepted meanwhile would lose its record to the deletion.
        self.deleting: set[int] = set()

    def get(self, ledger_id: int) -> LedgerDescriptor | None:
        """The ledger's descriptor, loaded from the storage if need be; None if the bookie has
        no record of the ledger (or is deleting it)."""
        found = self.cached.get(ledger_id)
        if found is not None:
            return found
        if ledger_id in self.deleting:
            return None
        record = self._storage.ledger_record(ledger_id)
        if record is None:
            return None
        lac = -1
        if record.explicit_lac is not None and len(record.explicit_lac) >= LAC_HEADER.size:
            lac = LAC_HEADER.unpack_from(record.explicit_lac)[1]
        # once per ledger after a restart: the LAC piggybacked on the last entry
        last = self._storage.last_entry_body(ledger_id)
        if last is not None and len(last) >= HEADER.size:
            lac = max(lac, HEADER.unpack_from(last)[2])
        found = LedgerDescriptor(record.master_key, record.fenced, record.explicit_lac, lac)
        self._remember(ledger_id, found)
        return found

    def create(self, ledger_id: int, master_key: bytes) -> LedgerDescriptor:
        """A descriptor for a ledger new to the bookie (the caller writes its key record)."""
        created = LedgerDescriptor(master_key)
        self._remember(ledger_id, created)
        return created

    def _remember(self, ledger_id: int, descriptor: LedgerDescriptor) -> None:
        if len(self.cached) >= self._max_cached:
            self.cached.clear()  # bounded; descriptors reload from the storage
        self.cached[ledger_id] = descriptor

    def start_deleting(self, ledger_ids: Collection[int]) -> None:
        self.deleting.update(ledger_ids)
        for ledger_id in ledger_ids:
            self.cached.pop(ledger_id, None)

    def done_deleting(self, ledger_ids: Collection[int]) -> None:
        self.deleting.difference_update(ledger_ids)
