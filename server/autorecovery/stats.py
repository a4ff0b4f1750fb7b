"""Prometheus metrics of ``pybk autorecovery`` (served on ``/metrics`` with ``--http-port``).

The auditor's and the replication worker's carry BookKeeper's names (its ``ReplicationStats``:
scope ``auditor`` / ``replication_worker``, then the stat's name), so dashboards made for it
find them (counters under their bare names, as BookKeeper writes them: ``bookie.stats.BookKeeperCounter``);
the ``autorecovery_*`` ones are pybookkeeper's own, kept for existing dashboards, with the Python
client's ``_total``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Summary

from bookie.stats import BookKeeperCounter


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
            "autorecovery_ledgers_rereplicated", "ledgers whose missing replicas were copied by this process",
            registry=registry,
        )
        self.ledger_failures = Counter(
            "autorecovery_ledger_failures", "ledgers that could not be re-replicated (retried later)",
            registry=registry,
        )
        self.entries_copied = Counter(
            "autorecovery_entries_copied", "entries copied to replace missing replicas", registry=registry
        )
        # -- the auditor (BookKeeper's names) --
        self.under_replicated = Gauge(
            "auditor_NUM_UNDER_REPLICATED_LEDGERS",
            "ledgers marked under-replicated in ZooKeeper, at the leader's last look", registry=registry,
        )
        self.ledgers_checked = BookKeeperCounter(
            "auditor_NUM_LEDGERS_CHECKED", "closed ledgers the ledger check went through", registry
        )
        self.entries_checked = BookKeeperCounter(
            "auditor_NUM_ENTRIES_CHECKED", "entries the ledger check compared (pybookkeeper extension)",
            registry=registry,
        )
        self.missing_entries = BookKeeperCounter(
            "auditor_NUM_MISSING_ENTRIES_FOUND",
            "entries the ledger check found missing on a registered bookie (pybookkeeper extension)",
            registry=registry,
        )
        self.check_all_ledgers_time = Summary(
            "auditor_CHECK_ALL_LEDGERS_TIME", "seconds a full ledger check took", registry=registry
        )
        self.placement_short = Gauge(
            "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY",
            "ledgers with a write quorum on too few racks, at the last placement check", registry=registry,
        )
        self.marked = BookKeeperCounter(
            "auditor_NUM_LEDGERS_MARKED", "under-replication marks the auditor wrote or extended",
            registry,
        )
        # -- the replication worker (BookKeeper's names) --
        self.rereplicate = Summary(
            "replication_worker_rereplicate", "seconds one ledger's repair took", registry=registry
        )
        self.ledgers_replicated = BookKeeperCounter(
            "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
            "ledgers this process's workers copied entries for", registry,
        )
        self.entries_written = BookKeeperCounter(
            "replication_worker_NUM_ENTRIES_WRITTEN", "entries the workers wrote to bookies",
            registry,
        )
        self.bytes_written = BookKeeperCounter(
            "replication_worker_NUM_BYTES_WRITTEN",
            "bytes the workers wrote back to a bookie that lost them (copies to a new bookie are"
            " counted in entries only)", registry=registry,
        )
        self.replicate_exceptions = BookKeeperCounter(
            "replication_worker_REPLICATE_EXCEPTION", "repairs that failed and were left for a retry",
            registry,
        )
