"""The daemon's bookie core: :class:`~bookie.bookie.Bookie` over a ``DbLedgerStorage``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from bookie.bookie import Bookie
from bookie.storage.config import StorageConfig
from bookie.storage.db_ledger_storage import DbLedgerStorage
from bookie.storage.ledger_directory import KvFactory, rocks_kv
from bookie.storage.stats import StorageStats


def bookie_on_disk(
    config: StorageConfig, registry: CollectorRegistry, kv_factory: KvFactory = rocks_kv
) -> Bookie:
    """A bookie storing in ``config``'s journal and ledger directories, its storage metrics in
    ``registry``; ``kv_factory`` opens the RocksDB indexes (tests pass an in-memory one)."""
    storage = DbLedgerStorage(config, StorageStats(registry), kv_factory)
    return Bookie(storage, max_lac_waiters=config.max_lac_waiters)
