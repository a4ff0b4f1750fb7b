"""A small key-value storage interface (BookKeeper's ``KeyValueStorage``), RocksDB and in-memory.

Keys and values are bytes and sort bytewise. rocksdict holds the GIL for get/put/write/iterate,
so callers batch writes (one WriteBatch per flush) and keep point lookups behind caches.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Protocol, cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)


class KeyValueStorage(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None:
        """Not synced: durable after the next :meth:`sync`."""
        ...

    def write_batch(self, items: Iterable[tuple[bytes, bytes]]) -> None: ...

    def delete(self, key: bytes) -> None:
        """Not synced, like :meth:`put`."""
        ...

    def delete_range(self, start: bytes, end: bytes) -> None:
        """Remove every key with start <= key < end (not synced)."""
        ...

    def floor(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The greatest (key, value) with key <= ``key``."""
        ...

    def range(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) for start <= key < end, ascending."""
        ...

    def range_list(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """The first ``limit`` items of :meth:`range`, in one call."""
        ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RocksTuning:
    """RocksDB options an operator may set (BookKeeper's ``dbStorage_rocksDB_*`` keys); None keeps
    RocksDB's default."""

    block_cache_bytes: int | None = None
    write_buffer_bytes: int | None = None
    block_size: int | None = None
    bloom_bits_per_key: int | None = None

    def apply(self, options: Options) -> None:
        if self.write_buffer_bytes is not None:
            options.set_write_buffer_size(self.write_buffer_bytes)
        if self.block_cache_bytes is None and self.block_size is None and self.bloom_bits_per_key is None:
            return
        table = BlockBasedOptions()
        if self.block_cache_bytes is not None:
            table.set_block_cache(Cache(self.block_cache_bytes))
        if self.block_size is not None:
            table.set_block_size(self.block_size)
        if self.bloom_bits_per_key:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        options.set_block_based_table_factory(table)


class RocksKeyValueStorage:
    def __init__(
        self, path: Path, *, create: bool = True, read_only: bool = False, tuning: RocksTuning | None = None
    ) -> None:
        """``create=False`` refuses a missing index (RocksDB raises) rather than start an empty one.
        ``read_only`` takes no lock and writes nothing, not even its recovery of the log (for
        inspection tools, which hold the lock themselves); such a store refuses writes."""
        options = Options(raw_mode=True)
        if tuning is not None:
            tuning.apply(options)
        options.create_if_missing(create and not read_only)
        access = AccessType.read_only() if read_only else AccessType.read_write()
        self._db = Rdict(str(path), options, access_type=access)
        self._read_only = read_only
        self._write_opt = WriteOptions()
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def put(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value, self._write_opt)

    def write_batch(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in items:
            batch.put(key, value)
        self._db.write(batch, self._write_opt)

    def delete(self, key: bytes) -> None:
        self._db.delete(key, self._write_opt)

    def delete_range(self, start: bytes, end: bytes) -> None:
        # one range tombstone, whatever the number of keys (a deleted ledger's whole index)
        self._db.delete_range(start, end, self._write_opt)

    def floor(self, key: bytes) -> tuple[bytes, bytes] | None:
        it = self._db.iter()
        it.seek_for_prev(key)
        if not it.valid():
            return None
        return bytes(it.key()), bytes(it.value())

    def range(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        read_opt = ReadOptions()
        read_opt.set_iterate_upper_bound(end)
        it = self._db.iter(read_opt)
        it.seek(start)
        while it.valid():
            yield bytes(it.key()), bytes(it.value())
            it.next()

    def range_list(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        # rocksdict's own item iterator, without a Python step per key: a range read's location
        # lookup takes a thousand keys at a time
        read_opt = ReadOptions()
        read_opt.set_iterate_upper_bound(end)
        items = cast(Iterator[tuple[bytes, bytes]], self._db.items(from_key=start, read_opt=read_opt))
        return list(islice(items, max(limit, 0)))

    def sync(self) -> None:
        # flush_wal releases the GIL; sync=True makes every earlier put durable
        self._db.flush_wal(True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._read_only:
                self._db.flush_wal(True)
            self._db.close()


class MemoryKeyValueStorage:
    """Sorted in-memory fake for unit tests; ``sync`` marks what would survive a crash."""

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes] = {}
        self.synced: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def write_batch(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.put(key, value)

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            self._keys.remove(key)

    def delete_range(self, start: bytes, end: bytes) -> None:
        low, high = bisect.bisect_left(self._keys, start), bisect.bisect_left(self._keys, end)
        for key in self._keys[low:high]:
            del self._data[key]
        del self._keys[low:high]

    def floor(self, key: bytes) -> tuple[bytes, bytes] | None:
        i = bisect.bisect_right(self._keys, key)
        if i == 0:
            return None
        k = self._keys[i - 1]
        return k, self._data[k]

    def range(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        i = bisect.bisect_left(self._keys, start)
        while i < len(self._keys) and self._keys[i] < end:
            k = self._keys[i]
            yield k, self._data[k]
            i += 1

    def range_list(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return list(islice(self.range(start, end), max(limit, 0)))

    def sync(self) -> None:
        self.synced = dict(self._data)

    def close(self) -> None:
        self.sync()
