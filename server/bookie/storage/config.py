"""Storage configuration: python names for BookKeeper's DbLedgerStorage and journal keys.

Each field documents the ``bk_server.conf`` key it stands for and BookKeeper's default
(reference/bookkeeper.md §2.2). Sizes the JVM derives from direct memory get fixed defaults here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .kv import RocksTuning


def _paths(values: list[Path] | list[str] | tuple[Path | str, ...]) -> list[Path]:
    return [Path(v) for v in values]


@dataclass
class StorageConfig:
    # journalDirectories: where the journal lives (default /tmp/bk-txn)
    journal_dirs: list[Path] = field(default_factory=lambda: [Path("/tmp/bk-txn")])
    # ledgerDirectories: entry logs, RocksDB indexes and lastMark (default /tmp/bk-data)
    ledger_dirs: list[Path] = field(default_factory=lambda: [Path("/tmp/bk-data")])
    # journalMaxGroupWaitMSec (2): longest a group commit waits for more data while data keeps arriving
    journal_max_group_wait_ms: float = 2.0
    # journalBufferedWritesThreshold (524288 bytes): a group this large is written without waiting
    journal_buffered_writes_threshold: int = 512 * 1024
    # journalFlushWhenQueueEmpty (false): never wait when the queue is empty
    journal_flush_when_queue_empty: bool = False
    # journalSyncData (true): fdatasync before acknowledging
    journal_sync_data: bool = True
    # journalRemoveFromPageCache (true): synced journal pages leave the OS page cache
    journal_remove_pages_from_cache: bool = True
    # journalPreAllocSizeMB (16): journal files grow in zero-filled chunks of this size
    journal_pre_alloc_size_mb: int = 16
    # journalMaxSizeMB (2048): roll to a new journal file past this size
    journal_max_size_mb: int = 2048
    # journalMaxBackups (5): journal files kept after the checkpoint no longer needs them
    journal_max_backups: int = 5
    # journalQueueSize (10000): queued journal records before adds wait
    journal_queue_size: int = 10_000
    # dbStorage_writeCacheMaxSizeMb (25 % of direct memory in Java): both halves together
    write_cache_max_size_mb: int = 64
    # dbStorage_maxThrottleTimeMs (10000): how long an add waits for write-cache room
    max_throttle_time_ms: int = 10_000
    # dbStorage_readAheadCacheMaxSizeMb (25 % of direct memory in Java)
    read_ahead_cache_max_size_mb: int = 32
    # dbStorage_readAheadCacheBatchSize (100): entries read ahead after a cache miss
    read_ahead_batch_size: int = 100
    # logSizeLimit (1 GiB): entry log rolls past this size
    entry_log_size_limit: int = 1024 * 1024 * 1024
    # minUsableSizeForEntryLogCreation (1.2 x logSizeLimit when None): a new entry log needs this
    # much free space in its directory. The reserve keeps room for the indexes and for garbage
    # collection, which must write to free space: RocksDB refuses all writes after one ENOSPC.
    min_usable_for_entry_log_bytes: int | None = None
    # not a BookKeeper key (entryLogPageCacheMB): MiB of each entry log kept in the OS page cache
    # behind its write position, older synced pages dropped; negative: no limit (BookKeeper)
    entry_log_page_cache_mb: int = 128
    # compactionRateByEntries (0 here: no limit): entries per second compaction may copy, on top
    # of compactionRateByBytes (BookKeeper picks one of the two by isThrottleByBytes; both apply
    # here, whichever is slower)
    compaction_rate_entries: int = 0
    # numReadWorkerThreads (8): threads that read entry logs on cache misses (the read pool)
    read_worker_threads: int = 8
    # maxPendingReadRequestsPerThread (10000; 0: no limit): cold reads waiting per read thread;
    # one more is refused with ETOOMANYREQUESTS instead of queueing without bound
    max_pending_reads_per_thread: int = 10_000
    # flushInterval (10000 ms): write cache is flushed (checkpoint) at least this often
    flush_interval_ms: int = 10_000
    # dbStorage_rocksDB_blockCacheSize, _writeBufferSizeMB, _blockSize, _bloomFilterBitsPerKey:
    # options of each RocksDB index; None keeps RocksDB's own default
    rocksdb_block_cache_bytes: int | None = None
    rocksdb_write_buffer_mb: int | None = None
    rocksdb_block_size: int | None = None
    rocksdb_bloom_bits_per_key: int | None = None
    # not a BookKeeper key: long-poll reads parked at once before new ones are refused
    max_lac_waiters: int = 10_000

    def __post_init__(self) -> None:
        self.journal_dirs = _paths(self.journal_dirs)
        self.ledger_dirs = _paths(self.ledger_dirs)
        if not self.journal_dirs or not self.ledger_dirs:
            raise ValueError("at least one journal dir and one ledger dir are needed")
        if self.write_cache_max_size_mb < 1:
            raise ValueError("write_cache_max_size_mb must be >= 1")

    def rocksdb_tuning(self) -> RocksTuning:
        return RocksTuning(
            block_cache_bytes=self.rocksdb_block_cache_bytes,
            write_buffer_bytes=_mib(self.rocksdb_write_buffer_mb),
            block_size=self.rocksdb_block_size,
            bloom_bits_per_key=self.rocksdb_bloom_bits_per_key,
        )

    @property
    def entry_log_reserve_bytes(self) -> int:
        if self.min_usable_for_entry_log_bytes is not None:
            return self.min_usable_for_entry_log_bytes
        return int(1.2 * self.entry_log_size_limit)

    @property
    def entry_log_page_cache_bytes(self) -> int:
        return self.entry_log_page_cache_mb * 1024 * 1024 if self.entry_log_page_cache_mb >= 0 else -1

    @property
    def write_cache_bytes(self) -> int:
        return self.write_cache_max_size_mb * 1024 * 1024

    @property
    def read_cache_bytes(self) -> int:
        return self.read_ahead_cache_max_size_mb * 1024 * 1024


def _mib(value: int | None) -> int | None:
    return None if value is None else value << 20
