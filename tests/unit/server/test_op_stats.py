"""BookKeeper's op stats: summaries with quantiles over a rollover window, split by success."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from bookie.stats import QUANTILES, ROLLOVER_S, OpLatency, OpStats


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_quantiles_come_from_the_recent_windows_and_counts_from_the_start() -> None:
    clock = FakeClock()
    op = OpLatency("bookie_TEST_OP", "test", clock=clock)
    op.observe(0.3, True, count=90)  # in the (0.25, 0.5] bucket
    op.observe(40.0, True, count=10)  # in (25, 50]
    op.observe(7.0, False)
    q = dict(op.quantiles(True))
    assert list(q) == list(QUANTILES)
    assert 0.25 <= q[0.5] <= 0.5 and 0.25 <= q[0.75] <= 0.5
    assert 25.0 <= q[0.95] <= 40.0 and q[1.0] == 40.0
    assert dict(op.quantiles(False))[1.0] == 7.0

    clock.now += ROLLOVER_S  # the window rolls: still covered as the previous one
    assert dict(op.quantiles(True))[1.0] == 40.0
    clock.now += ROLLOVER_S  # and again: nothing recent
    assert all(math.isnan(v) for _, v in op.quantiles(True))
    assert op.count(True) == 100 and op.count(False) == 1  # counts never roll


def test_exposition_is_bookkeepers_summary_shape() -> None:
    registry = CollectorRegistry()
    op = OpLatency("bookie_journal_JOURNAL_SYNC", "sync")
    OpStats(registry, [op])
    op.observe(1.2)
    text = generate_latest(registry).decode()
    assert "# TYPE bookie_journal_JOURNAL_SYNC summary" in text
    assert 'bookie_journal_JOURNAL_SYNC{quantile="1.0",success="true"} 1.2' in text
    median = registry.get_sample_value("bookie_journal_JOURNAL_SYNC", {"quantile": "0.5", "success": "true"})
    assert median is not None and 1.0 <= median <= 1.2  # within its bucket, never above the max
    assert 'bookie_journal_JOURNAL_SYNC_count{success="true"} 1.0' in text
    assert 'bookie_journal_JOURNAL_SYNC_sum{success="true"} 1.2' in text
    assert 'bookie_journal_JOURNAL_SYNC{quantile="0.99",success="false"} NaN' in text
    assert registry.get_sample_value("bookie_journal_JOURNAL_SYNC_count", {"success": "false"}) == 0.0


def test_quantiles_never_exceed_the_largest_value() -> None:
    beyond = OpLatency("x", "x")
    beyond.observe(12_000.0)  # past the last bucket bound
    assert dict(beyond.quantiles(True))[0.99] == 12_000.0
    tiny = OpLatency("y", "y")
    tiny.observe(0.01)
    assert 0.0 < dict(tiny.quantiles(True))[0.99] <= 0.01
