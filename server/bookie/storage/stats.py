"""Storage metrics with BookKeeper's names (``BookKeeperServerStats`` / ``DbLedgerStorageStats``).

Registered on the registry given to the bookie, so several bookies can live in one process.
Latencies are BookKeeper op stats (``bookie.stats.OpLatency``: summaries in milliseconds labelled
``success``, as BookKeeper's Prometheus provider writes them). Hot paths observe once per batch or
group, never per entry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from bookie.stats import BookKeeperCounter, OpLatency, OpStats


class StorageStats:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.journal_add_entry = OpLatency(
            "bookie_journal_JOURNAL_ADD_ENTRY",
            "Journal add latency (ms): enqueue to durable, observed once per batch",
        )
        self.journal_sync = OpLatency(
            "bookie_journal_JOURNAL_SYNC", "Journal group write + fdatasync latency (ms)"
        )
        self.journal_queue_size = Gauge(
            "bookie_journal_JOURNAL_QUEUE_SIZE", "Journal records waiting to be written", registry=registry
        )
        self.journal_write_bytes = BookKeeperCounter(
            "bookie_journal_JOURNAL_WRITE_BYTES", "Bytes written to the journal", registry
        )
        self.write_cache_size = Gauge(
            "bookie_write_cache_size", "Bytes in the write cache (both halves)", registry=registry
        )
        self.flush = OpLatency("bookie_flush", "Write-cache flush latency (ms): entry log, index, mark")
        OpStats(registry, [self.journal_add_entry, self.journal_sync, self.flush])
        self.throttled_adds = BookKeeperCounter(
            "bookie_throttled_write_requests", "Adds that waited for write-cache room", registry
        )
        self.rejected_adds = BookKeeperCounter(
            "bookie_rejected_write_requests", "Adds refused with ETOOMANYREQUESTS", registry
        )
        self.read_cache_hits = BookKeeperCounter("bookie_read_cache_hits", "Read-cache hits", registry)
        self.read_cache_misses = BookKeeperCounter("bookie_read_cache_misses", "Read-cache misses", registry)
        self.write_cache_hits = BookKeeperCounter(
            "bookie_write_cache_hits", "Reads served by the write cache", registry
        )
        self.read_cache_size = Gauge("bookie_read_cache_size", "Bytes in the read cache", registry=registry)
