"""Prometheus metrics of ``pybk autorecovery`` (served on ``/metrics`` with ``--http-port``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AutoRecoveryStats:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.leader = Gauge(
            "autorecovery_leader", "1 while this process leads the cluster's autorecovery", registry=registry
        )
        self.lost_bookies = Gauge(
            "autorecovery_lost_bookies", "bookies named by ledgers but not registered, at the last check",
            registry=registry,
        )
        self.replication_enabled = Gauge(
            "autorecovery_replication_enabled",
            "0 while an operator has disabled re-replication (pybk shell autorecovery --disable)",
            registry=registry,
        )
        self.lost_bookie_delay = Gauge(
            "autorecovery_lost_bookie_delay_seconds", "the cluster's lostBookieRecoveryDelay in force",
            registry=registry,
        )
        self.checks = Counter("autorecovery_checks", "checks for lost bookies made", registry=registry)
        self.ledgers_rereplicated = Counter(
            "autorecovery_ledgers_rereplicated", "ledgers whose lost replicas were copied", registry=registry
        )
        self.ledger_failures = Counter(
            "autorecovery_ledger_failures", "ledgers that could not be re-replicated (retried later)",
            registry=registry,
        )
        self.entries_copied = Counter(
            "autorecovery_entries_copied", "entries copied to replace lost replicas", registry=registry
        )
