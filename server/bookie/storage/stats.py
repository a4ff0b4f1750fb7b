"""Storage metrics with BookKeeper's names (``BookKeeperServerStats`` / ``DbLedgerStorageStats``).

Registered on the registry given to the bookie, so several bookies can live in one process.
Latencies are histograms in milliseconds with sub-millisecond buckets (a journal fdatasync on a
good disk is a fraction of a millisecond). Hot paths observe once per batch or group, never per entry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 25.0, 50.0, 100.0,
    250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
)  # fmt: skip


class StorageStats:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.journal_add_entry = Histogram(
            "bookie_journal_JOURNAL_ADD_ENTRY",
            "Journal add latency (ms): enqueue to durable, observed once per batch",
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.journal_sync = Histogram(
            "bookie_journal_JOURNAL_SYNC",
            "Journal group write + fdatasync latency (ms)",
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.journal_queue_size = Gauge(
            "bookie_journal_JOURNAL_QUEUE_SIZE", "Journal records waiting to be written", registry=registry
        )
        self.journal_write_bytes = Counter(
            "bookie_journal_JOURNAL_WRITE_BYTES", "Bytes written to the journal", registry=registry
        )
        self.write_cache_size = Gauge(
            "bookie_write_cache_size", "Bytes in the write cache (both halves)", registry=registry
        )
        self.flush = Histogram(
            "bookie_flush",
            "Write-cache flush latency (ms): entry log + index + checkpoint",
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.throttled_adds = Counter(
            "bookie_throttled_write_requests", "Adds that waited for write-cache room", registry=registry
        )
        self.rejected_adds = Counter(
            "bookie_rejected_write_requests", "Adds refused with ETOOMANYREQUESTS", registry=registry
        )
        self.read_cache_hits = Counter("bookie_read_cache_hits", "Read-cache hits", registry=registry)
        self.read_cache_misses = Counter("bookie_read_cache_misses", "Read-cache misses", registry=registry)
        self.write_cache_hits = Counter(
            "bookie_write_cache_hits", "Reads served by the write cache", registry=registry
        )
        self.read_cache_size = Gauge("bookie_read_cache_size", "Bytes in the read cache", registry=registry)
