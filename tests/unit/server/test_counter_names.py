"""Counters named after BookKeeper's are written as BookKeeper's Prometheus provider writes them
(``<name> <value>``, no ``_total``), so its dashboards and alert rules find them; counters that
are pybookkeeper's own keep the Python client's ``<name>_total``."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from autorecovery.stats import AutoRecoveryStats
from bookie.gc import GcStats
from bookie.limits import LimitStats
from bookie.stats import BookKeeperCounter
from bookie.storage.stats import StorageStats

BOOKKEEPER_COUNTERS = (
    "bookie_journal_JOURNAL_WRITE_BYTES",
    "bookie_read_cache_hits",
    "bookie_read_cache_misses",
    "bookie_write_cache_hits",
    "bookie_throttled_write_requests",
    "bookie_rejected_write_requests",
    "bookie_DELETED_LEDGER_COUNT",
    "bookie_RECLAIMED_DELETION_SPACE_BYTES",
    "bookie_RECLAIMED_COMPACTION_SPACE_BYTES",
    "bookie_MINOR_COMPACTION_COUNT",
    "bookie_MAJOR_COMPACTION_COUNT",
    "auditor_NUM_LEDGERS_CHECKED",
    "auditor_NUM_LEDGERS_MARKED",
    "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
    "replication_worker_NUM_ENTRIES_WRITTEN",
    "replication_worker_NUM_BYTES_WRITTEN",
    "replication_worker_REPLICATE_EXCEPTION",
)


def exposition() -> str:
    registry = CollectorRegistry()
    StorageStats(registry)
    GcStats(registry)
    AutoRecoveryStats(registry)
    LimitStats(registry).hit("grpc", "connections")
    return generate_latest(registry).decode()


@pytest.mark.parametrize("name", BOOKKEEPER_COUNTERS)
def test_bookkeeper_counters_are_written_under_their_bare_name(name: str) -> None:
    lines = exposition().splitlines()
    assert f"{name} 0.0" in lines
    assert not any(line.startswith((f"{name}_total", f"{name}_created")) for line in lines)
    assert f"# TYPE {name} untyped" in lines


def test_our_own_counters_keep_total() -> None:
    lines = exposition().splitlines()
    assert 'bookkeeper_server_LIMIT_REJECTIONS_total{limit="connections",listener="grpc"} 1.0' in lines
    assert "autorecovery_checks_total 0.0" in lines


def test_a_bookkeeper_counter_adds_up_and_refuses_to_go_down() -> None:
    registry = CollectorRegistry()
    counter = BookKeeperCounter("bookie_journal_JOURNAL_WRITE_BYTES", "bytes", registry)
    counter.inc()
    counter.inc(4096)
    assert registry.get_sample_value("bookie_journal_JOURNAL_WRITE_BYTES") == 4097.0
    with pytest.raises(ValueError, match="only goes up"):
        counter.inc(-1)
    assert counter.get() == 4097.0
