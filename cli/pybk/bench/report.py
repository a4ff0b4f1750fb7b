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
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, TextIO

from hdrh.histogram import HdrHistogram

from pybk import event_loop

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # an hour; a slower operation is recorded as an hour
SIGNIFICANT_DIGITS = 3
SUMMARY_PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0),
                                                      ("p999", 99.9))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


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


# How often staged latencies are folded (counted into the run's buckets, sorted for the second's
# percentiles): the largest single step of recording is then a tenth of a second's operations.
FOLD_INTERVAL_S = 0.1


class LatencyRecorder:
    """The run's latency histogram and its per-second series. Times (``now``, ``started``) are on
    whatever monotonic clock the benchmark uses, the same for every call.

    Latencies (µs) are staged in a list and folded every ``FOLD_INTERVAL_S``: counted into the
    run's buckets (a ``Counter`` keyed by each HdrHistogram counter's lowest value,
    :func:`bucket_floor`) and sorted. Each second's row (operations, p50, p99, max) comes from its
    sorted chunks, merged once; the run's HdrHistogram is built from the bucket counts when it is
    read, the same histogram recording each latency alone gives. Why no HdrHistogram per second:
    ``hdrh`` is pure Python, and folding a second's latencies into one, then reading its
    percentiles, held the benchmark's event loop 20-50 ms once a second: a stall in the process
    of the client under test, shared with its adds. A hot completion callback stages its
    latency itself: when ``now >= next_fold_at`` it calls :meth:`advance` first, then
    ``stage_us(latency_us)`` (an int; the histogram's range is applied when folded)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.series: list[SecondRow] = []
        self._second = 0
        self._counted_ops = 0  # operations of this second without a latency (:meth:`count`)
        self._staged: list[int] = []  # since the last fold; cleared in place
        self.stage_us = self._staged.append  # one operation's latency (µs), completed now
        self._chunks: list[list[int]] = []  # this second's folded latencies, each chunk sorted
        self._buckets: Counter[int] = Counter()  # the run's: counter's lowest value -> operations
        self._folded = 0  # latencies in _buckets
        self._histogram: HdrHistogram | None = None  # built from _buckets when read
        self.next_fold_at = started + FOLD_INTERVAL_S
        self._finished = False

    def record(self, latency_ms: float, now: float, count: int = 1) -> None:
        """``count`` operations that completed at ``now`` after ``latency_ms`` each."""
        if now >= self.next_fold_at:  # the hot path skips the call
            self.advance(now)
        us = int(latency_ms * 1000.0 + 0.5)
        if count == 1:
            self._staged.append(us)
        else:
            self._staged.extend(repeat(us, count))

    def count(self, now: float, count: int = 1) -> None:
        """``count`` operations that completed at ``now``, latency not measured (a catch-up read)."""
        if now >= self.next_fold_at:
            self.advance(now)
        self._counted_ops += count

    def advance(self, now: float) -> None:
        """Fold what is staged (it completed before ``now``), then close every whole second
        before ``now``."""
        self._fold()
        second = max(self._second, int(now - self.started))
        while self._second < second:
            self._close_second(1.0)
        self.next_fold_at = min(self.started + self._second + 1.0, now + FOLD_INTERVAL_S)

    def _fold(self) -> None:
        staged = self._staged
        if not staged:
            return
        chunk = sorted(staged)
        staged.clear()
        if chunk[0] < LOWEST_US or chunk[-1] > HIGHEST_US:
            chunk = [min(HIGHEST_US, max(LOWEST_US, us)) for us in chunk]
        self._buckets.update(map(bucket_floor, chunk))
        self._folded += len(chunk)
        self._chunks.append(chunk)
        self._histogram = None

    def finish(self, now: float) -> None:
        """Close the last, partial second; call once, at the end of the measured phase."""
        if self._finished:
            return
        self.advance(now)
        partial = now - (self.started + self._second)
        if self._counted_ops or self._chunks or partial > 0.05:
            self._close_second(min(1.0, max(partial, 1e-3)))
        self._finished = True

    def _close_second(self, duration_s: float) -> None:
        self._fold()
        chunks = self._chunks
        if chunks:
            # sorted chunks: one merge of runs
            values = chunks[0] if len(chunks) == 1 else sorted(chain.from_iterable(chunks))
            p50, p99 = percentile(values, 50.0) / 1000.0, percentile(values, 99.0) / 1000.0
            row = SecondRow(self._second, duration_s, len(values) + self._counted_ops, round(p50, 3),
                            round(p99, 3), round(values[-1] / 1000.0, 3))
            self._chunks = []
        else:
            row = SecondRow(self._second, duration_s, self._counted_ops, None, None, None)
        self.series.append(row)
        self._second += 1
        self._counted_ops = 0

    @property
    def histogram(self) -> HdrHistogram:
        """The run's latencies folded so far (all of them once :meth:`finish` ran)."""
        if self._histogram is None:
            histogram = new_histogram()
            record = histogram.record_value
            for us, count in self._buckets.items():
                record(us, count)
            self._histogram = histogram
        return self._histogram

    @property
    def total_count(self) -> int:
        """Latencies recorded so far."""
        return self._folded + len(self._staged)


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
            "event_loop": event_loop.chosen(),
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

