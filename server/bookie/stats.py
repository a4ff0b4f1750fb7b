"""Request metrics of the gRPC layer, with BookKeeper's names (``BookKeeperServerStats.java``).

Every request type has one latency "op stat" in milliseconds named and shaped as BookKeeper's
Prometheus provider writes it (``bookkeeper_server_ADD_ENTRY_REQUEST``, a summary with quantiles,
labelled ``success="true|false"``), so BookKeeper's dashboards and alert rules find the series.
The quantiles are read from buckets that start well below a millisecond: a journal fsync costs
0.1-0.2 ms on our disks.

Adds arrive in batches, and every add of a batch shares the same latency (message received →
response sent). :class:`OpLatency` therefore records ``count`` observations in one call: the cost is
per message, not per entry, which matters at 100k+ entries/s. Updates happen on the event loop; the
HTTP thread collects under a small lock.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric

from bookie.limits import LimitStats

SERVER_SCOPE = "bookkeeper_server"

# Upper bounds in ms; +Inf is implicit.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 25.0, 50.0, 100.0,
    250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
)  # fmt: skip


# BookKeeper's Prometheus provider (PrometheusTextFormat.writeOpStat): these quantiles, 1.0 = max
QUANTILES: tuple[float, ...] = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
# prometheusStatsLatencyRolloverSeconds' default: quantiles cover the last one or two windows
ROLLOVER_S = 60.0


class _Window:
    """Bucket counts and the largest value of one rollover window, for one outcome."""

    def __init__(self, slots: int) -> None:
        self.counts = [0] * slots
        self.max = float("nan")

    def add(self, slot: int, value: float, count: int) -> None:
        self.counts[slot] += count
        if not self.max >= value:  # also replaces the NaN of an empty window
            self.max = value


class OpLatency:
    """One BookKeeper "op stat", exposed as BookKeeper's Prometheus provider writes it: a summary
    in milliseconds labelled ``success="true|false"``, with quantiles 0.5 ... 0.9999 and 1.0 (the
    largest value) over the last rollover window or two, and ``_count``/``_sum`` since start.

    Quantiles are read from bucket counts (linear within a bucket, the window's largest value past
    the last bound) rather than from BookKeeper's sketches: recording stays a bisect and an add,
    which matters at 100k+ entries/s. NaN while a window saw nothing, as BookKeeper writes."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float] = LATENCY_BUCKETS_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = tuple(buckets)
        self._clock = clock
        self._lock = threading.Lock()
        slots = len(self._bounds) + 1  # last slot: above the last bound
        self._totals = {True: 0, False: 0}
        self._sums = {True: 0.0, False: 0.0}
        self._current = {True: _Window(slots), False: _Window(slots)}
        self._previous = {True: _Window(slots), False: _Window(slots)}
        self._window_began = clock()

    def observe(self, latency_ms: float, success: bool = True, count: int = 1) -> None:
        """Record ``count`` operations that each took ``latency_ms``."""
        if count <= 0:
            return
        slot = bisect.bisect_left(self._bounds, latency_ms)
        with self._lock:
            self._roll()
            self._totals[success] += count
            self._sums[success] += latency_ms * count
            self._current[success].add(slot, latency_ms, count)

    def count(self, success: bool) -> int:
        with self._lock:
            return self._totals[success]

    def _roll(self) -> None:
        """Start a new window once the current one is ROLLOVER_S old (under the lock)."""
        now = self._clock()
        if now - self._window_began < ROLLOVER_S:
            return
        slots = len(self._bounds) + 1
        stale = now - self._window_began >= 2 * ROLLOVER_S  # nothing recent to keep
        for outcome in (True, False):
            self._previous[outcome] = _Window(slots) if stale else self._current[outcome]
            self._current[outcome] = _Window(slots)
        self._window_began = now

    def quantiles(self, success: bool) -> list[tuple[float, float]]:
        with self._lock:
            self._roll()
            current, previous = self._current[success], self._previous[success]
            counts = [a + b for a, b in zip(current.counts, previous.counts, strict=True)]
            largest = max(current.max, previous.max, key=lambda v: -1.0 if math.isnan(v) else v)
        return [(q, _quantile(q, counts, self._bounds, largest)) for q in QUANTILES]

    def metric(self) -> Metric:
        family = Metric(self.name, self.documentation, "summary")
        for success in (True, False):
            label = "true" if success else "false"
            for q, value in self.quantiles(success):
                family.add_sample(self.name, {"success": label, "quantile": repr(q)}, value)
            with self._lock:
                total, latency_sum = self._totals[success], self._sums[success]
            family.add_sample(f"{self.name}_count", {"success": label}, float(total))
            family.add_sample(f"{self.name}_sum", {"success": label}, latency_sum)
        return family


def _quantile(q: float, counts: Sequence[int], bounds: Sequence[float], largest: float) -> float:
    total = sum(counts)
    if total == 0:
        return float("nan")
    if q >= 1.0:
        return largest
    rank = q * total
    seen = 0
    for slot, n in enumerate(counts):
        if n and seen + n >= rank:
            if slot >= len(bounds):
                return largest
            lower = bounds[slot - 1] if slot > 0 else 0.0
            upper = min(bounds[slot], largest)
            return lower + (upper - lower) * max(rank - seen, 0.0) / n
        seen += n
    return largest


class BookKeeperCounter:
    """A counter exported under BookKeeper's exact name: ``<name> <value>``, no ``_total``.

    BookKeeper's Prometheus provider (``PrometheusTextFormat.writeCounter``) writes a counter under
    its bare name, while the Python client's ``Counter`` always appends ``_total`` (and adds a
    ``_created`` series), so a dashboard made for BookKeeper would find nothing. The family is
    declared ``untyped``: the client's text writer appends ``_total`` to the name of every family
    typed ``counter``. Prometheus stores and ``rate()``s an untyped series like a counter.
    Names that are pybookkeeper's own keep the client's ``Counter`` and its ``_total``."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry | None) -> None:
        self.name = name
        self.documentation = documentation
        self._value = 0.0
        self._lock = threading.Lock()  # increments on the event loop, collection on the HTTP thread
        if registry is not None:
            registry.register(self)

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up (inc by {amount})")
        with self._lock:
            self._value += amount

    def get(self) -> float:
        with self._lock:
            return self._value

    def collect(self) -> Iterator[Metric]:
        family = Metric(self.name, self.documentation, "unknown")
        family.add_sample(self.name, {}, self.get())
        yield family

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, "unknown")]


class OpStats:
    """A collector of op stats registered on a bookie's registry (storage, garbage collection)."""

    def __init__(self, registry: CollectorRegistry, ops: Sequence[OpLatency]) -> None:
        self._ops = list(ops)
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        for op in self._ops:
            yield op.metric()

    def describe(self) -> list[Metric]:
        return [Metric(op.name, op.documentation, "summary") for op in self._ops]


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
        metrics: list[Metric] = [Metric(op.name, op.documentation, "summary") for op in self._all]
        return [*metrics, self._add_port_gauge(0)]

    @staticmethod
    def _add_port_gauge(value: int) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{SERVER_SCOPE}_ADD_PORT_CONNECTIONS", "Connections open on the add port (pybookkeeper)", value
        )
