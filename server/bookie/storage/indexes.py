"""RocksDB-backed indexes of one ledger directory (BookKeeper's ``LedgerMetadataIndex`` and
``EntryLocationIndex``).

Ledger index: key = ledgerId as 8 big-endian bytes, value = ``storage_pb2.LedgerData`` (exists,
fenced, masterKey, explicitLac), cached in memory. Entry-location index: key = 16 big-endian bytes
``ledgerId || entryId`` (bytewise order = numeric order for non-negative ids), value = entry log id,
offset and body length. The last entry of a ledger is a reverse seek (``floor``).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

from bkproto.v1 import storage_pb2

from .api import LedgerRecord
from .entry_logger import LOCATION
from .kv import KeyValueStorage

log = logging.getLogger(__name__)

LEDGER_KEY = struct.Struct(">q")
ENTRY_KEY = struct.Struct(">qq")
_MAX_ID = (1 << 63) - 1
_END_OF_LEDGERS = b"\x80"  # above every non-negative big-endian ledger id


class Locations(NamedTuple):
    """Where a run of a ledger's entries is, column by column (one entry per position)."""

    entry_ids: list[int]
    log_ids: list[int]
    offsets: list[int]
    lengths: list[int]


_NO_LOCATIONS = Locations([], [], [], [])
_entry_id_of = itemgetter(1)


def _ledger_span(ledger_id: int) -> tuple[bytes, bytes]:
    """[start, end) of the ledger's keys in the entry-location index."""
    end = LEDGER_KEY.pack(ledger_id + 1) if ledger_id < _MAX_ID else _END_OF_LEDGERS
    return LEDGER_KEY.pack(ledger_id), end


class LedgerIndex:
    def __init__(self, kv: KeyValueStorage) -> None:
        self._kv = kv
        self._cache: dict[int, LedgerRecord | None] = {}
        # The event loop, the flush thread and garbage collection all read and change records:
        # a lookup and the caching of its answer must not interleave with a put or a delete.
        self._lock = threading.Lock()
        # Records RocksDB refused (after one failed write it refuses all, e.g. on a full disk).
        # Kept here, never evicted, and written by the next sync, which fails while they cannot
        # be: no checkpoint moves past their journal records, so they survive a restart, and a
        # fence or a new ledger still works meanwhile (also while replaying the journal).
        self._unsaved: dict[int, LedgerRecord | None] = {}

    def get(self, ledger_id: int) -> LedgerRecord | None:
        with self._lock:
            if ledger_id in self._unsaved:
                return self._unsaved[ledger_id]
            if ledger_id in self._cache:
                return self._cache[ledger_id]
            raw = self._kv.get(LEDGER_KEY.pack(ledger_id))
            record = None
            if raw is not None:
                data = storage_pb2.LedgerData.FromString(raw)
                if data.exists:
                    lac = data.explicitLac if data.HasField("explicitLac") else None
                    record = LedgerRecord(bytes(data.masterKey), data.fenced, lac)
            if len(self._cache) > 100_000:
                self._cache.clear()  # bounded: the index is the truth, the cache only saves lookups
            self._cache[ledger_id] = record
            return record

    def put(self, ledger_id: int, record: LedgerRecord) -> None:
        """Not synced here: durable at the next checkpoint; the journal covers the gap."""
        self._change(ledger_id, record)

    def delete(self, ledger_id: int) -> None:
        """Forget the ledger (garbage collection); durable at the next :meth:`sync`."""
        self._change(ledger_id, None)

    def _change(self, ledger_id: int, record: LedgerRecord | None) -> None:
        with self._lock:
            self._cache[ledger_id] = record
            if ledger_id not in self._unsaved:  # else a later write would land before it
                try:
                    self._write(ledger_id, record)
                    return
                except Exception as exc:  # noqa: BLE001 - kept for the next sync, which reports it
                    if not self._unsaved:
                        log.error("ledger index refused a write (%s); records wait in memory", exc)
            self._unsaved[ledger_id] = record

    def _write(self, ledger_id: int, record: LedgerRecord | None) -> None:
        key = LEDGER_KEY.pack(ledger_id)
        if record is None:
            self._kv.delete(key)
            return
        data = storage_pb2.LedgerData(exists=True, fenced=record.fenced, masterKey=record.master_key)
        if record.explicit_lac is not None:
            data.explicitLac = record.explicit_lac
        self._kv.put(key, data.SerializeToString())

    def ids(self) -> list[int]:
        """Every ledger this directory holds, ascending."""
        stored = {
            LEDGER_KEY.unpack(key)[0]
            for key, raw in self._kv.range(LEDGER_KEY.pack(0), _END_OF_LEDGERS)
            if storage_pb2.LedgerData.FromString(raw).exists
        }
        with self._lock:
            for ledger_id, record in self._unsaved.items():
                if record is None:
                    stored.discard(ledger_id)
                else:
                    stored.add(ledger_id)
        return sorted(stored)

    def sync(self) -> None:
        """Write what RocksDB refused before (raising while it still does), then sync."""
        with self._lock:
            for ledger_id, record in list(self._unsaved.items()):
                self._write(ledger_id, record)
                del self._unsaved[ledger_id]
        self._kv.sync()


class EntryLocationIndex:
    def __init__(self, kv: KeyValueStorage) -> None:
        self._kv = kv

    def add_batch(self, keys: Sequence[bytes], locations: Sequence[bytes]) -> None:
        """Index entries: ``keys`` and ``locations`` as ``EntryLogger.append`` returns them."""
        self._kv.write_batch(zip(keys, locations, strict=True))

    def get(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        raw = self._kv.get(ENTRY_KEY.pack(ledger_id, entry_id))
        return None if raw is None else LOCATION.unpack(raw)

    def last_entry(self, ledger_id: int) -> int:
        found = self._kv.floor(ENTRY_KEY.pack(ledger_id, _MAX_ID))
        if found is None:
            return -1
        led, entry = ENTRY_KEY.unpack(found[0])
        return entry if led == ledger_id else -1

    def following(self, ledger_id: int, first: int, count: int) -> list[tuple[int, int, int, int]]:
        """(entry id, log id, offset, length) of ``first`` and of the next entries of the ledger
        held here, up to ``count`` in all; none if ``first`` is not held. Ids may skip: a bookie
        of a striped ledger (E > Qw) holds Qw of every E entries, and its read-ahead must cover
        the next ones it holds, as BookKeeper's does (it follows the entry log, not the ids)."""
        return list(zip(*self.following_columns(ledger_id, first, count), strict=True))

    def following_columns(self, ledger_id: int, first: int, count: int) -> Locations:
        """:meth:`following` as columns, unpacked in bulk: one scan of the index and one unpack
        over all the keys and one over all the values, not a chain of calls per entry."""
        start = ENTRY_KEY.pack(ledger_id, first)
        found = self._kv.range_list(start, _ledger_span(ledger_id)[1], count)
        if not found or found[0][0] != start:
            return _NO_LOCATIONS
        keys, values = zip(*found, strict=True)
        entry_ids = list(map(_entry_id_of, ENTRY_KEY.iter_unpack(b"".join(keys))))
        log_ids, offsets, lengths = zip(*LOCATION.iter_unpack(b"".join(values)), strict=True)
        return Locations(entry_ids, list(log_ids), list(offsets), list(lengths))

    def entry_ids(self, ledger_id: int) -> list[int]:
        return [ENTRY_KEY.unpack(k)[1] for k, _ in self._kv.range(*_ledger_span(ledger_id))]

    def entry_log_ids(self, ledger_id: int) -> list[tuple[int, int]]:
        """(entry id, id of the entry log holding it) of every indexed entry of the ledger."""
        span = self._kv.range(*_ledger_span(ledger_id))
        return [(ENTRY_KEY.unpack(k)[1], LOCATION.unpack(v)[0]) for k, v in span]

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop every entry location of the ledger (garbage collection); durable at :meth:`sync`."""
        self._kv.delete_range(*_ledger_span(ledger_id))

    def sync(self) -> None:
        self._kv.sync()
