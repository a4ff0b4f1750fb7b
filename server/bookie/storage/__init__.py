"""DbLedgerStorage: journal, write cache, entry logs, RocksDB indexes, read cache."""
