"""The benchmarks' report: HdrHistogram percentiles, the per-second series and the JSON shape that
scripts read."""

from __future__ import annotations

import json

import pytest
from hdrh.histogram import HdrHistogram

from pybk.bench.report import BenchResult, LatencyRecorder, percentile

OLD_KEYS = {"entries", "errors", "elapsed_s", "throughput_eps", "throughput_mbps", "latency_ms"}


def test_percentile_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 99) == 0.0


def test_json_report_shape(capsys: pytest.CaptureFixture[str]) -> None:
    recorder = LatencyRecorder(started=100.0)
    for ms in (1.0, 2.0, 3.0):
        recorder.record(ms, now=100.5)
    recorder.finish(102.0)
    BenchResult(entries=1000, errors=1, elapsed_s=2.0, entry_size=1024, latencies=recorder).print(True, "x")
    d = json.loads(capsys.readouterr().out)
    assert set(d) >= OLD_KEYS
    assert d["throughput_eps"] == 500.0
    assert d["throughput_mbps"] == 0.51
    assert set(d["latency_ms"]) == {"p50", "p95", "p99", "p999", "max"}
    assert d["latency_ms"]["max"] == pytest.approx(3.0, rel=1e-3)  # HdrHistogram: 3 significant digits
    assert d["latency_ms"]["p50"] == 2.0
    assert d["latency_samples"] == 3
    assert d["coordinated_omission"] == "not paced"
    assert [row["ops"] for row in d["per_second"]] == [3, 0]
    assert HdrHistogram.decode(d["latency_hdr_us"].encode()).get_total_count() == 3


def test_the_series_has_a_row_per_second_with_that_seconds_percentiles() -> None:
    recorder = LatencyRecorder(started=10.0)
    for i in range(100):
        recorder.record(1.0, now=10.0 + i / 100)  # second 0: 100 ops of 1 ms
    recorder.record(50.0, now=12.2, count=4)  # nothing in second 1; second 2: 4 ops of 50 ms
    recorder.finish(12.5)
    rows = recorder.series
    assert [r.second for r in rows] == [0, 1, 2]
    assert [r.ops for r in rows] == [100, 0, 4]
    assert (rows[0].p50_ms, rows[0].p99_ms) == (1.0, 1.0)
    assert rows[1].p50_ms is None
    assert rows[2].p99_ms == pytest.approx(50.0, rel=1e-3)
    assert rows[2].duration_s == pytest.approx(0.5)
    assert rows[2].ops_per_s == pytest.approx(8.0)
    assert recorder.histogram.get_total_count() == 104


def test_latencies_staged_by_a_callback_land_in_the_second_they_completed_in() -> None:
    """The hot path (``stage_us``, ``advance`` once ``next_fold_at`` passed) gives the series
    ``record`` gives."""
    recorder = LatencyRecorder(started=10.0)
    for i in range(300):
        now = 10.0 + i / 100  # three seconds, 100 ops each, second n's ops taking n + 1 ms
        if now >= recorder.next_fold_at:
            recorder.advance(now)
        recorder.stage_us((int(i / 100) + 1) * 1000)
    recorder.finish(13.0)
    rows = recorder.series
    assert [r.ops for r in rows] == [100, 100, 100]
    assert [r.p99_ms for r in rows] == pytest.approx([1.0, 2.0, 3.0], rel=1e-3)
    assert recorder.histogram.get_total_count() == 300


def test_memory_does_not_grow_with_the_number_of_operations() -> None:
    recorder = LatencyRecorder(started=0.0)
    size = len(recorder.histogram.counts)
    for i in range(50_000):
        recorder.record(0.5 + (i % 1000) / 10.0, now=i / 50_000)
    recorder.finish(1.0)
    assert len(recorder.histogram.counts) == size
    assert len(recorder.series) == 1
    assert recorder.histogram.get_total_count() == 50_000


def test_paced_results_report_both_latencies(capsys: pytest.CaptureFixture[str]) -> None:
    corrected, service = LatencyRecorder(0.0), LatencyRecorder(0.0)
    corrected.record(40.0, now=0.5)  # due 40 ms before it completed, sent late (a stall)
    service.record(2.0, now=0.5)
    corrected.finish(1.0)
    service.finish(1.0)
    BenchResult(1, 0, 1.0, 10, corrected, service_latencies=service).print(False, "paced")
    text = capsys.readouterr().out
    assert "latency ms p50 40.0" in text
    assert "service latency ms (from the actual send) p50 2.0" in text
    assert "per second:" in text


def test_staged_latencies_make_the_histogram_that_recording_each_one_makes() -> None:
    """Latencies are staged and folded per second, values sharing a counter recorded together:
    the histogram (every counter, the percentiles and the max) must be the one recording each
    latency alone gives, over values from a microsecond to past the hour clamp."""
    values_us = [1, 2, 999, 2047, 2048, 2049, 4097, 123_456, 123_457, 987_654_321, 3_600_000_000,
                 3_700_000_000] + [(i * 7919) % 5_000_000 + 1 for i in range(70_000)]
    recorder = LatencyRecorder(started=0.0)
    alone = HdrHistogram(1, 3_600_000_000, 3)
    for us in values_us:
        recorder.record(us / 1000.0, now=0.5)
        alone.record_value(min(us, 3_600_000_000))
    recorder.finish(0.9)
    staged = recorder.histogram
    assert list(staged.counts) == list(alone.counts)
    assert staged.get_total_count() == alone.get_total_count() == len(values_us)
    assert staged.get_max_value() == alone.get_max_value()
    assert staged.get_min_value() == alone.get_min_value()
    for q in (50.0, 99.0, 99.9):
        assert staged.get_value_at_percentile(q) == alone.get_value_at_percentile(q)
