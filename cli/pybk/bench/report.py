"""Latency recording and the one report format every benchmark prints (design §7)."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class BenchResult:
    entries: int
    errors: int
    elapsed_s: float
    entry_size: int
    latencies_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        eps = self.entries / self.elapsed_s if self.elapsed_s > 0 else 0.0
        out: dict[str, Any] = {
            "entries": self.entries,
            "errors": self.errors,
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_eps": round(eps, 1),
            "throughput_mbps": round(eps * self.entry_size / 1e6, 2),
            "latency_ms": {
                "p50": round(percentile(lat, 50), 3),
                "p95": round(percentile(lat, 95), 3),
                "p99": round(percentile(lat, 99), 3),
                "p999": round(percentile(lat, 99.9), 3),
                "max": round(lat[-1], 3) if lat else 0.0,
            },
        }
        out.update(self.extra)
        return out

    def print(self, as_json: bool, title: str, out: TextIO | None = None) -> None:
        out = out or sys.stdout
        d = self.as_dict()
        if as_json:
            print(json.dumps(d), file=out)
            return
        lat = d["latency_ms"]
        print(f"{title}: {d['entries']} entries, {d['errors']} errors in {d['elapsed_s']} s", file=out)
        print(f"  throughput {d['throughput_eps']:,.0f} entries/s, {d['throughput_mbps']} MB/s", file=out)
        print(
            f"  latency ms p50 {lat['p50']} p95 {lat['p95']} p99 {lat['p99']}"
            f" p999 {lat['p999']} max {lat['max']}",
            file=out,
        )
        for key, value in self.extra.items():
            print(f"  {key}: {value}", file=out)


class Progress:
    """Prints a one-line progress counter about once a second, only on a terminal."""

    def __init__(self, total: int | None, out: TextIO | None = None) -> None:
        self._total = total
        # sys.stderr looked up now, not at import: it may have been replaced since (pytest does)
        self._out = out = sys.stderr if out is None else out
        self._enabled = out.isatty()
        self._start = time.monotonic()
        self._last = self._start

    def update(self, done: int) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        rate = done / (now - self._start)
        of = f"/{self._total}" if self._total else ""
        self._out.write(f"\r  {done}{of} entries, {rate:,.0f}/s   ")
        self._out.flush()

    def done(self) -> None:
        if self._enabled:
            self._out.write("\r" + " " * 60 + "\r")
            self._out.flush()
