"""Storage metrics with BookKeeper's names (``BookKeeperServerStats`` / ``DbLedgerStorageStats``).

Registered on the registry given to the bookie, so several bookies can live in one process.
Latencies are BookKeeper op stats (``bookie.stats.OpLatency``: summaries in milliseconds labelled
``success``, as BookKeeper's Prometheus provider writes them). Hot paths observe once per batch or
group, never per entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric

from bookie.stats import SERVER_SCOPE, BookKeeperCounter, OpLatency, OpStats

# BookieRequestProcessor's read executor, in the server scope (OrderedExecutor's stats)
READ_POOL = f"{SERVER_SCOPE}_BookieReadThreadPool"


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
        self.journal_creation = OpLatency(
            "bookie_journal_JOURNAL_CREATION_LATENCY",
            "Time to create a new journal file (ms): create, header, first zero-filled piece, fsyncs",
        )
        self.flush = OpLatency("bookie_flush", "Write-cache flush latency (ms): entry log, index, mark")
        self.read_entry = OpLatency(
            "bookie_read_entry", "Storage read latency (ms): caches, else entry log; success=false: no entry"
        )
        self.read_pool_task_queued = OpLatency(
            f"{READ_POOL}_task_queued", "Wait of a cold read (cache miss) for a thread (ms)"
        )
        self.read_pool_task_execution = OpLatency(
            f"{READ_POOL}_task_execution", "Time a cold read (cache miss) ran on its thread (ms)"
        )
        OpStats(
            registry,
            [
                self.journal_add_entry, self.journal_sync, self.journal_creation, self.flush,
                self.read_entry, self.read_pool_task_queued, self.read_pool_task_execution,
            ],
        )  # fmt: skip
        self.read_pool_queue = ReadQueueGauges(registry)
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


class ReadQueueGauges:
    """The read pool's queue length under both names BookKeeper has used for it.

    BookKeeper up to 4.16 writes one gauge per thread, ``BookieReadThreadPool_queue_<thread>``;
    later releases write ``BookieReadThreadPool_queue{thread="<thread>"}``. pybookkeeper's cold
    reads wait in one queue (``storage.read_pool``), exported as thread 0 under both names, so
    dashboards of either release find it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # the storage that owns the pool supplies the count
        self.waiting: Callable[[], int] = lambda: 0
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.waiting())

    def describe(self) -> list[Metric]:
        return self._families(0)

    @staticmethod
    def _families(waiting: int) -> list[Metric]:
        what = "Cold reads (cache misses) waiting for a thread"
        per_name = GaugeMetricFamily(f"{READ_POOL}_queue_0", what, waiting)
        labelled = GaugeMetricFamily(f"{READ_POOL}_queue", what, labels=["thread"])
        labelled.add_metric(["0"], waiting)
        return [per_name, labelled]
