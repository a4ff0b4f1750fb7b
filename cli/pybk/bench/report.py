"""Latency recording and the one report format every benchmark prints (design §7).

Latencies go into HdrHistograms (the ``hdrhistogram`` package): a fixed-size array of counts, so
memory does not grow with the number of operations however long a run lasts, at three significant
digits from 1 µs to an hour. Besides the whole run's histogram the recorder keeps a per-second
series (operations, p50, p99 and max of each second of the run): one small row per second, drawn
by ``--plot`` and printed after the summary.

Coordinated omission: a benchmark paced with ``--rate`` measures each operation from the time it
was due to be sent (``LatencyRecorder.record`` with the scheduled start), so a stall that holds
back later sends counts in their latency, as their users would see it; the time from the actual
send is kept beside it as ``service_latency_ms``.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # an hour; a slower operation is recorded as an hour
SIGNIFICANT_DIGITS = 3
SUMMARY_PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0),
                                                      ("p999", 99.9))


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def to_us(latency_ms: float) -> int:
    return min(HIGHEST_US, max(LOWEST_US, round(latency_ms * 1000.0)))


def summary_ms(histogram: HdrHistogram) -> dict[str, float]:
    """p50, p95, p99, p999 and max in ms (0.0 each for an empty histogram)."""
    if histogram.get_total_count() == 0:
        return {**{name: 0.0 for name, _ in SUMMARY_PERCENTILES}, "max": 0.0}
    out = {name: round(histogram.get_value_at_percentile(q) / 1000.0, 3) for name, q in SUMMARY_PERCENTILES}
    out["max"] = round(histogram.get_max_value() / 1000.0, 3)
    return out


@dataclass(frozen=True)
class SecondRow:
    """One second of a run: operations completed in it and their latency percentiles (None when
    none completed, or when the benchmark counts completions without latencies)."""

    second: int  # 0 for the first second of the run
    duration_s: float  # 1.0, less for the last, partial second
    ops: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.duration_s if self.duration_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"second": self.second, "ops_per_s": round(self.ops_per_s, 1), "ops": self.ops,
                "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "max_ms": self.max_ms}


# The histogram's sub-bucket count is 2 ** _SUB_BUCKET_BITS at SIGNIFICANT_DIGITS = 3 (2 x 10^3,
# rounded up to a power of two): a value of b > 11 bits shares its counter with every value that
# has the same top 11 bits.
_SUB_BUCKET_BITS = 11


def bucket_floor(us: int) -> int:
    """The lowest value sharing ``us``'s counter in a :func:`new_histogram` (HdrHistogram's
    ``get_lowest_equivalent_value``, without its method calls)."""
    shift = us.bit_length() - _SUB_BUCKET_BITS
    return us >> shift << shift if shift > 0 else us


def bucket_counts(latencies_us: list[int]) -> Counter[int]:
    """How many of ``latencies_us`` fall on each counter of a :func:`new_histogram`, keyed by the
    counter's lowest value (:func:`bucket_floor`), each clamped to the histogram's range first."""
    if latencies_us and (min(latencies_us) < LOWEST_US or max(latencies_us) > HIGHEST_US):
        latencies_us = [min(HIGHEST_US, max(LOWEST_US, us)) for us in latencies_us]
    return Counter(map(bucket_floor, latencies_us))


class LatencyRecorder:
    """The run's latency histogram and its per-second series. Times (``now``, ``started``) are on
    whatever monotonic clock the benchmark uses, the same for every call.

    Single latencies are staged in a list and folded into the histogram once per second (the
    list holds at most one second of operations), each value into the counter it would have
    reached alone, the values sharing one counter in one ``record_value`` call
    (:func:`bucket_counts`). The histogram is the same; recording one at a time cost the
    benchmark's client a Python call chain per operation, CPU taken from the client it measures
    on the same cores. A hot completion callback stages its latency itself: when
    ``now >= next_second_at`` it calls :meth:`advance` first, then ``stage_us(latency_us)``
    (an int; the histogram's range is applied when the second is folded)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.histogram = new_histogram()
        self.series: list[SecondRow] = []
        self._second = 0
        self._second_histogram = new_histogram()
        self._second_ops = 0
        self._staged: list[int] = []  # latencies in µs, this second's; cleared in place
        self.stage_us = self._staged.append  # one operation's latency (µs), completed in this second
        self.next_second_at = started + 1.0
        self._finished = False

    def record(self, latency_ms: float, now: float, count: int = 1) -> None:
        """``count`` operations that completed at ``now`` after ``latency_ms`` each."""
        if now >= self.next_second_at:  # the hot path skips the call
            self.advance(now)
        if count == 1:
            self._staged.append(int(latency_ms * 1000.0 + 0.5))
        else:
            self._second_histogram.record_value(to_us(latency_ms), count)
            self._second_ops += count

    def _fold(self) -> None:
        """Record the staged latencies into the second's histogram."""
        staged = self._staged
        if not staged:
            return
        record = self._second_histogram.record_value
        for us, count in bucket_counts(staged).items():
            record(us, count)
        self._second_ops += len(staged)
        staged.clear()

    def count(self, now: float, count: int = 1) -> None:
        """``count`` operations that completed at ``now``, latency not measured (a catch-up read)."""
        self.advance(now)
        self._second_ops += count

    def finish(self, now: float) -> None:
        """Close the last, partial second; call once, at the end of the measured phase."""
        if self._finished:
            return
        self.advance(now)
        partial = now - (self.started + self._second)
        if self._second_ops or self._staged or partial > 0.05:
            self._close_second(min(1.0, max(partial, 1e-3)))
        self._finished = True

    def advance(self, now: float) -> None:
        """Close every whole second before ``now`` (the staged latencies belong to the first)."""
        second = max(self._second, int(now - self.started))
        while self._second < second:
            self._close_second(1.0)
        self.next_second_at = self.started + self._second + 1.0

    def _close_second(self, duration_s: float) -> None:
        self._fold()
        h = self._second_histogram
        if h.get_total_count():
            self.histogram.add(h)
            p50, p99 = h.get_value_at_percentile(50.0) / 1000.0, h.get_value_at_percentile(99.0) / 1000.0
            row = SecondRow(self._second, duration_s, self._second_ops, round(p50, 3), round(p99, 3),
                            round(h.get_max_value() / 1000.0, 3))
            self._second_histogram = new_histogram()  # cheaper than reset(), which clears in Python
        else:
            row = SecondRow(self._second, duration_s, self._second_ops, None, None, None)
        self.series.append(row)
        self._second += 1
        self._second_ops = 0

    @property
    def total_count(self) -> int:
        return int(self.histogram.get_total_count() + self._second_histogram.get_total_count()
                   + len(self._staged))


@dataclass
class BenchResult:
    entries: int
    errors: int
    elapsed_s: float
    entry_size: int
    latencies: LatencyRecorder
    extra: dict[str, Any] = field(default_factory=dict)
    # The time from each operation's actual send, when ``latencies`` counts from the scheduled one.
    service_latencies: LatencyRecorder | None = None

    def as_dict(self, with_series: bool = True) -> dict[str, Any]:
        """The JSON report; without the per-second series and the encoded histogram when
        ``with_series`` is False (a phase nested in another report)."""
        eps = self.entries / self.elapsed_s if self.elapsed_s > 0 else 0.0
        out: dict[str, Any] = {
            "entries": self.entries,
            "errors": self.errors,
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_eps": round(eps, 1),
            "throughput_mbps": round(eps * self.entry_size / 1e6, 2),
            "latency_ms": summary_ms(self.latencies.histogram),
            "latency_samples": self.latencies.histogram.get_total_count(),
            "coordinated_omission": "corrected" if self.service_latencies is not None else "not paced",
        }
        if with_series:
            out["per_second"] = [row.as_dict() for row in self.latencies.series]
            # the whole histogram, compressed (HdrHistogram's own encoding): merge or re-plot runs
            histogram = self.latencies.histogram
            out["latency_hdr_us"] = histogram.encode().decode() if histogram.get_total_count() else ""
        if self.service_latencies is not None:
            out["service_latency_ms"] = summary_ms(self.service_latencies.histogram)
        out.update(self.extra)
        return out

    def print(self, as_json: bool, title: str, out: TextIO | None = None) -> None:
        out = out or sys.stdout
        d = self.as_dict()
        if as_json:
            print(json.dumps(d), file=out)
            return
        print(f"{title}: {d['entries']} entries, {d['errors']} errors in {d['elapsed_s']} s", file=out)
        print(f"  throughput {d['throughput_eps']:,.0f} entries/s, {d['throughput_mbps']} MB/s", file=out)
        print(f"  latency ms {_percentiles_line(d['latency_ms'])}", file=out)
        if "service_latency_ms" in d:
            print(f"  service latency ms (from the actual send) {_percentiles_line(d['service_latency_ms'])}",
                  file=out)
        for key, value in self.extra.items():
            print(f"  {key}: {value}", file=out)
        print_series(self.latencies.series, out)


def _percentiles_line(lat: dict[str, float]) -> str:
    return f"p50 {lat['p50']} p95 {lat['p95']} p99 {lat['p99']} p999 {lat['p999']} max {lat['max']}"


def print_series(series: list[SecondRow], out: TextIO) -> None:
    if not series:
        return
    print("  per second:", file=out)
    print(f"  {'second':>8} {'ops/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}", file=out)
    for row in series:
        cells = [f"{v:9.3f}" if v is not None else f"{'-':>9}" for v in (row.p50_ms, row.p99_ms, row.max_ms)]
        print(f"  {row.second:>8} {row.ops_per_s:>9,.0f} {' '.join(cells)}", file=out)

