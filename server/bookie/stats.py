"""Request metrics of the gRPC layer, with BookKeeper's names (``BookKeeperServerStats.java``).

Every request type has one latency histogram in milliseconds named like BookKeeper's Prometheus
provider names it (``bookkeeper_server_ADD_ENTRY_REQUEST``), labelled ``success="true|false"``, so
BookKeeper dashboards find the series. Buckets start well below a millisecond: a journal fsync costs
0.1-0.2 ms on our disks and the default Prometheus buckets (5 ms and up) would hide everything.

Adds arrive in batches, and every add of a batch shares the same latency (message received →
response sent). :class:`OpLatency` therefore records ``count`` observations in one call: the cost is
per message, not per entry, which matters at 100k+ entries/s. Updates happen on the event loop; the
HTTP thread collects under a small lock.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, HistogramMetricFamily, Metric

from bookie.limits import LimitStats

SERVER_SCOPE = "bookkeeper_server"

# Upper bounds in ms; +Inf is implicit.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 25.0, 50.0, 100.0,
    250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
)  # fmt: skip


class OpLatency:
    """One BookKeeper "op stat": a latency histogram (ms) split by ``success``."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = tuple(buckets)
        self._lock = threading.Lock()
        # per outcome: non-cumulative bucket counts (last slot = +Inf) and the sum of values
        self._counts = {True: [0] * (len(self._bounds) + 1), False: [0] * (len(self._bounds) + 1)}
        self._sums = {True: 0.0, False: 0.0}

    def observe(self, latency_ms: float, success: bool, count: int = 1) -> None:
        """Record ``count`` requests that each took ``latency_ms``."""
        if count <= 0:
            return
        slot = bisect.bisect_left(self._bounds, latency_ms)
        with self._lock:
            self._counts[success][slot] += count
            self._sums[success] += latency_ms * count

    def count(self, success: bool) -> int:
        with self._lock:
            return sum(self._counts[success])

    def metric(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["success"])
        for success in (True, False):
            with self._lock:
                counts = list(self._counts[success])
                total = self._sums[success]
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, n in zip((*self._bounds, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(["true" if success else "false"], buckets, total)
        return family


class RequestStats:
    """The request latency stats of one bookie, registered on the bookie's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def op(name: str, what: str) -> OpLatency:
            return OpLatency(f"{SERVER_SCOPE}_{name}", f"{what} (ms, from request received to response)")

        self.add_entry_request = op("ADD_ENTRY_REQUEST", "Add entry requests")
        self.read_entry_request = op("READ_ENTRY_REQUEST", "Read entry requests")
        self.read_entry_fence_request = op("READ_ENTRY_FENCE_REQUEST", "Fencing read requests")
        self.read_entry_long_poll_request = op("READ_ENTRY_LONG_POLL_REQUEST", "Long-poll read requests")
        self.read_entries_request = op("READ_ENTRIES_REQUEST", "Batched read requests")
        self.stride_poll_request = op("STRIDE_POLL_REQUEST", "Tailing readers' stride long polls")
        self.write_lac = op("WRITE_LAC", "Explicit LAC writes")
        self.read_lac = op("READ_LAC", "LAC reads")
        self.force_ledger = op("FORCE_LEDGER", "Force ledger requests")
        self.get_bookie_info = op("GET_BOOKIE_INFO", "Bookie info requests")
        self.get_list_of_entries_of_ledger = op("GET_LIST_OF_ENTRIES_OF_LEDGER", "List-of-entries requests")
        self._all = [
            self.add_entry_request,
            self.read_entry_request,
            self.read_entry_fence_request,
            self.read_entry_long_poll_request,
            self.read_entries_request,
            self.stride_poll_request,
            self.write_lac,
            self.read_lac,
            self.force_ledger,
            self.get_bookie_info,
            self.get_list_of_entries_of_ledger,
        ]
        # Connections open on the add port; its server, if any, supplies the count.
        self.add_port_connections: Callable[[], int] = lambda: 0
        registry.register(self)
        self.limits = LimitStats(registry)  # every listener counts what its limits refused

    def collect(self) -> Iterator[Metric]:
        for op in self._all:
            yield op.metric()
        yield self._add_port_gauge(self.add_port_connections())

    def describe(self) -> list[Metric]:
        # Lets the registry detect name clashes at registration without collecting values.
        metrics: list[Metric] = [
            HistogramMetricFamily(op.name, op.documentation, labels=["success"]) for op in self._all
        ]
        return [*metrics, self._add_port_gauge(0)]

    @staticmethod
    def _add_port_gauge(value: int) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{SERVER_SCOPE}_ADD_PORT_CONNECTIONS", "Connections open on the add port (pybookkeeper)", value
        )
