"""The bookie's configuration keys: BookKeeper's names (and pybookkeeper's extensions), each with
the parser that types and validates its value and the field it sets (:mod:`bookie.config` builds
the configuration from them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bookie.config_sources import ConfigError


def _int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError("expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ConfigError(f"must be {bounds}")
        return value

    return parse


def _float(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError("expected a number") from None
        if not value >= minimum:  # also rejects NaN
            raise ConfigError(f"must be >= {minimum}")
        return value

    return parse


# parsers of keys written in milliseconds whose value is kept in seconds (--print-config turns
# a default back into milliseconds)
MS_PARSERS: set[Callable[[str], float]] = set()


def _seconds_from_ms(minimum_ms: int) -> Callable[[str], float]:
    def parse(text: str) -> float:
        return _int(minimum_ms)(text) / 1000.0

    MS_PARSERS.add(parse)
    return parse


def _time_limit_from_ms(text: str) -> float:
    """Milliseconds to seconds; zero or less means no limit (-1.0), as BookKeeper reads it."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError("expected an integer") from None
    return value / 1000.0 if value > 0 else -1.0


MS_PARSERS.add(_time_limit_from_ms)


def _placement(text: str) -> str:
    """``random``/``rackaware``, or BookKeeper's class name for either."""
    name = text.strip().rsplit(".", 1)[-1]
    names = {"random": "random", "DefaultEnsemblePlacementPolicy": "random", "rackaware": "rackaware",
             "RackawareEnsemblePlacementPolicy": "rackaware"}
    if name not in names:
        raise ConfigError(f"expected random or rackaware, got {text!r}")
    return names[name]


def _fraction(text: str) -> float:
    value = _float(0.0)(text)
    if value > 1.0:
        raise ConfigError("must be between 0 and 1")
    return value


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError("expected true or false")


def _text(text: str) -> str:
    if not text:
        raise ConfigError("must not be empty")
    return text


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _pem_type(text: str) -> str:
    if text.upper() != "PEM":
        raise ConfigError("only PEM is supported (JKS and PKCS12 are Java keystores)")
    return text.upper()


def _dirs(text: str) -> tuple[str, ...]:
    dirs = tuple(part.strip() for part in text.split(",") if part.strip())
    if not dirs:
        raise ConfigError("expected a comma-separated list of directories")
    return dirs


@dataclass(frozen=True)
class Key:
    parse: Callable[[str], Any]
    storage_field: str | None = None  # StorageConfig field the value goes to, if a storage key
    help: str = ""
    gc_field: str | None = None  # GcSettings field the value goes to, if a garbage-collection key
    read_only_field: str | None = None  # ReadOnlySettings field, if a read-only-mode / disk key
    autorecovery_field: str | None = None  # AutoRecoverySettings field (read by pybk autorecovery)
    limits_field: str | None = None  # ListenerLimits field, if a limit on what peers may make it hold


KEYS: dict[str, Key] = {
    # daemon
    "bookiePort": Key(_int(0, 65535), help="gRPC port (0 = pick a free one)"),
    "bookieAddPort": Key(
        _int(-1, 65535),
        help="add port: the AddEntries stream over plain TCP, the clients' fast path for adds"
        " (0 = pick a free one, advertised in the registration; -1 = none, adds go over gRPC;"
        " pybookkeeper extension)",
    ),
    "bindAddress": Key(_text, help="address to listen on (pybookkeeper extension; default 0.0.0.0)"),
    "advertisedAddress": Key(_text, help="address clients use; the bookie id is <address>:<port>"),
    "bookieRack": Key(
        _text,
        help="network location advertised in the bookie's registration, e.g. /region/rack1"
        " (pybookkeeper extension: the rack-aware placement policy reads it)",
    ),
    "httpServerEnabled": Key(_bool, help="serve /heartbeat and /metrics"),
    "httpServerPort": Key(_int(0, 65535), help="HTTP admin port (0 = pick a free one)"),
    "httpServerHost": Key(
        _text, help="address the HTTP admin port listens on (127.0.0.1; BookKeeper's default is 0.0.0.0)"
    ),
    # transport security (bookie.security): one TLS setup for gRPC, the add port and HTTP
    "tlsCertificatePath": Key(
        _text, help="PEM certificate chain of the bookie; with tlsKeyStore it turns TLS on"
    ),
    "tlsKeyStore": Key(_text, help="PEM private key of the bookie (tlsKeyStoreType=PEM)"),
    "tlsKeyStoreType": Key(_pem_type, help="PEM (the only type supported)"),
    "tlsTrustStore": Key(_text, help="PEM CA bundle client certificates must chain to"),
    "tlsTrustStoreType": Key(_pem_type, help="PEM (the only type supported)"),
    "tlsClientAuthentication": Key(_bool, help="require a client certificate (mutual TLS; false)"),
    "tlsCertFilesRefreshDurationSeconds": Key(
        _int(0), help="seconds between checks for renewed TLS files, reloaded without a restart (0: off)"
    ),
    "bookieAuthProviderFactoryClass": Key(
        _names, help="authentication providers, comma-separated: mtls (client certificate common name),"
        " token (bearer token); set, every request needs an identity (needs TLS)",
    ),
    "bookieAuthTokenFile": Key(
        _text, help="file of identity=token (or identity=sha256:<hex>) lines for the token provider"
    ),
    "bookieAuthorizationFile": Key(
        _text, help="file of identity=read,write,fence,admin lines; * for any identity (default:"
        " read, write and fence for every authenticated identity, admin for none)",
    ),
    # ZooKeeper ACLs (bkmeta.zk_security)
    "zkEnableSecurity": Key(_bool, help="create znodes readable and writable by the cluster identity only"),
    "zkTlsTrustStore": Key(
        _text, help="PEM CA of ZooKeeper's certificate: connect to its secure client port over TLS"
        " (pybookkeeper extension)",
    ),
    "zkTlsCertificatePath": Key(_text, help="PEM client certificate for ZooKeeper, if it asks for one"),
    "zkTlsKeyStore": Key(_text, help="PEM key of zkTlsCertificatePath"),
    "zkDigestAuthFile": Key(
        _text, help="file holding user:password, the cluster's ZooKeeper digest identity"
        " (pybookkeeper extension)",
    ),
    "metadataServiceUri": Key(_text, help="zk+hierarchical://host:port[;host:port]/ledgers"),
    "zkServers": Key(_text, help="ZooKeeper connect string, or 'none' to run unregistered"),
    "zkTimeout": Key(_int(1), help="ZooKeeper session timeout (ms)"),
    # At most 15 MiB: one entry must fit in a 16 MiB gRPC message with its framing.
    "nettyMaxFrameSizeBytes": Key(_int(1024, 15 * 1024 * 1024), help="largest entry body accepted (bytes)"),
    "shutdownGracePeriodMs": Key(_int(0), help="how long in-flight requests may finish on SIGTERM"),
    # limits on what peers may make the bookie hold (bookie.limits.ListenerLimits; pybookkeeper
    # extensions: BookKeeper bounds only frames and pending requests)
    "maxConnections": Key(
        _int(1), help="connections open at once on the add port, and on gRPC (1024)",
        limits_field="max_connections",
    ),
    "maxConnectionsPerIp": Key(
        _int(1), help="add-port connections open at once from one IP address, and gRPC connections"
        " carrying calls (64)",
        limits_field="max_connections_per_peer",
    ),
    "maxBufferedBytes": Key(
        _int(1024 * 1024), help="bytes of add-port frames being received, all peers together (128 MiB)",
        limits_field="max_buffered_bytes",
    ),
    "maxBufferedBytesPerIp": Key(
        _int(1024 * 1024), help="bytes of add-port frames being received from one IP address (32 MiB)",
        limits_field="max_buffered_bytes_per_peer",
    ),
    "frameTimeoutMs": Key(
        _seconds_from_ms(100), help="ms a peer may take to send a whole add-port frame, or a gRPC"
        " call its request, and a TLS handshake (30000)",
        limits_field="frame_timeout_s",
    ),
    "writeTimeoutMs": Key(
        _seconds_from_ms(100), help="ms an add-port peer may leave its answers unread before it is"
        " closed (60000)", limits_field="write_timeout_s",
    ),
    "maxAddsPerMessage": Key(
        _int(1), help="adds in one add-stream message; a bigger message ends the stream (100000)",
        limits_field="max_adds_per_message",
    ),
    "addsPerLoopTurn": Key(
        _int(1), help="adds of one message processed before other clients' requests get a turn (4096)",
        limits_field="adds_per_loop_turn",
    ),
    "maxLongPollsPerIp": Key(
        _int(1), help="long-poll reads parked at once from one IP address (2500)",
        limits_field="max_long_polls_per_peer",
    ),
    "maxSlowRequests": Key(
        _int(1), help="gRPC calls waiting for a request not arrived within 1 s, all peers (16)",
        limits_field="max_slow_requests",
    ),
    "maxSlowRequestsPerIp": Key(
        _int(1), help="gRPC calls waiting for a request not arrived within 1 s, per IP address (4)",
        limits_field="max_slow_requests_per_peer",
    ),
    "connectionIdleTimeoutMs": Key(
        _seconds_from_ms(1000), help="ms a gRPC connection may stay open without calls (300000)",
        limits_field="connection_idle_timeout_s",
    ),
    "httpServerMaxConnections": Key(
        _int(1), help="HTTP admin requests served at once, a quarter of them per IP address; more get"
        " 503 (16)",
        limits_field="http_max_connections",
    ),
    "httpServerRequestTimeoutMs": Key(
        _seconds_from_ms(100), help="ms an HTTP admin client may take to send a whole request (10000)",
        limits_field="http_request_timeout_s",
    ),
    # garbage collection (needs ZooKeeper: it compares the bookie's ledgers with the metadata's);
    # the defaults are GcSettings'
    "gcWaitTime": Key(
        _seconds_from_ms(1000), help="ms between garbage collections (600000)", gc_field="wait_time_s"
    ),
    "verifyMetadataOnGC": Key(
        _bool,
        help="read a ledger's metadata once more before deleting it (default true; BookKeeper's is"
        " false: one ZooKeeper read per deleted ledger buys safety against a wrong listing)",
        gc_field="verify_metadata",
    ),
    "minorCompactionThreshold": Key(
        _fraction, help="compact entry logs with less live data than this share (0.2; 0: off)",
        gc_field="minor_threshold",
    ),
    "minorCompactionInterval": Key(
        _int(0), help="seconds between minor compactions (3600; 0: off)", gc_field="minor_interval_s"
    ),
    "majorCompactionThreshold": Key(
        _fraction, help="compact entry logs with less live data than this share (0.8; 0: off)",
        gc_field="major_threshold",
    ),
    "majorCompactionInterval": Key(
        _int(0), help="seconds between major compactions (86400; 0: off)", gc_field="major_interval_s"
    ),
    "compactionRateByBytes": Key(
        _int(0), help="bytes/s compaction may copy (1000000; 0: no limit)", gc_field="rate_bytes"
    ),
    "numReadWorkerThreads": Key(
        _int(1), "read_worker_threads", help="threads reading entry logs on cache misses (8)",
    ),
    "maxPendingReadRequestsPerThread": Key(
        _int(0), "max_pending_reads_per_thread",
        help="cold reads waiting per read thread; more get ETOOMANYREQUESTS (10000; 0: no limit)",
    ),
    "compactionRateByEntries": Key(
        _int(0), "compaction_rate_entries",
        help="entries/s compaction may copy, besides compactionRateByBytes (0: no limit)",
    ),
    "minorCompactionMaxTimeMillis": Key(
        _time_limit_from_ms, help="ms a minor compaction pass may run, the least used logs first"
        " (-1: no limit)", gc_field="minor_max_time_s",
    ),
    "majorCompactionMaxTimeMillis": Key(
        _time_limit_from_ms, help="ms a major compaction pass may run, the least used logs first"
        " (-1: no limit)", gc_field="major_max_time_s",
    ),
    "isForceGCAllowWhenNoSpace": Key(
        _bool, help="when disks run short, force compaction instead of pausing it (false)",
        gc_field="force_when_no_space",
    ),
    # read-only mode and disk usage (ReadOnlySettings; BookKeeper's defaults)
    "readOnlyModeEnabled": Key(
        _bool, help="turn read-only when a disk fills or a journal fails (true); false: shut down",
        read_only_field="read_only_mode_enabled",
    ),
    "forceReadOnlyBookie": Key(
        _bool, help="start read-only and stay so (false)", read_only_field="force_read_only"
    ),
    "persistBookieStatusEnabled": Key(
        _bool, help="keep an operator's read-only (PUT .../state/readonly) across restarts (false)",
        read_only_field="persist_status",
    ),
    "readOnlyModeOnAnyDiskFullEnabled": Key(
        _bool, help="read-only when any directory is full (true); false: only when all are",
        read_only_field="any_disk_full",
    ),
    "diskUsageThreshold": Key(
        _fraction, help="share of a disk in use above which its directory is full (0.95)",
        read_only_field="usage_threshold",
    ),
    "diskUsageWarnThreshold": Key(
        _fraction, help="share in use above which major compaction pauses (0.90)",
        read_only_field="warn_threshold",
    ),
    "diskUsageLwmThreshold": Key(
        _fraction, help="share in use below which a full directory is writable again (= diskUsageThreshold)",
        read_only_field="lwm_threshold",
    ),
    "diskCheckInterval": Key(
        _seconds_from_ms(10), help="ms between disk usage checks (10000)", read_only_field="check_interval_s"
    ),
    "minUsableSizeForHighPriorityWrites": Key(
        _int(0), help="bytes every directory needs free for a read-only bookie to take recovery adds"
        " (1.2 x logSizeLimit)", read_only_field="min_usable_high_priority_bytes",
    ),
    # autorecovery (`pybk autorecovery` reads the same file, as BookKeeper's AutoRecoveryMain does)
    "lostBookieRecoveryDelay": Key(
        _int(0, 2**31 - 1),  # BookKeeper's znode holds a Java int
        help="seconds a bookie must be gone before its data is re-replicated (0)",
        autorecovery_field="lost_bookie_delay_s",
    ),
    "auditorPeriodicBookieCheckInterval": Key(
        _int(0), help="seconds between full checks for lost bookies, besides every change (86400; 0: off)",
        autorecovery_field="check_interval_s",
    ),
    "replicationRateByBytes": Key(
        _int(-1), help="bytes per second re-replication may write, over all its copies (-1: no limit)",
        autorecovery_field="replication_rate_bytes",
    ),
    "auditorPeriodicCheckInterval": Key(
        _int(0), help="seconds between ledger checks: every bookie of every closed ledger is asked"
        " which entries it holds (604800; 0: off)", autorecovery_field="ledger_check_interval_s",
    ),
    "auditorLedgerCheckEntriesPerSecond": Key(
        _int(0), help="entries the ledger check compares per second at most (10000; 0: no limit;"
        " pybookkeeper extension)", autorecovery_field="ledger_check_entries_per_s",
    ),
    "rwRereplicateBackoffMs": Key(
        _seconds_from_ms(0), help="ms a worker leaves a ledger it could not repair before trying it"
        " again (5000)", autorecovery_field="rereplicate_backoff_s",
    ),
    "auditorPeriodicPlacementPolicyCheckInterval": Key(
        _int(0), help="seconds between checks that every write quorum spans minNumRacksPerWriteQuorum"
        " racks (0: off)", autorecovery_field="placement_check_interval_s",
    ),
    "ensemblePlacementPolicy": Key(
        _placement, help="autorecovery's placement policy: random or rackaware (BookKeeper's class names"
        " DefaultEnsemblePlacementPolicy / RackawareEnsemblePlacementPolicy are taken too)",
        autorecovery_field="placement_policy",
    ),
    "minNumRacksPerWriteQuorum": Key(
        _int(1), help="racks each write quorum should span under rackaware (2)",
        autorecovery_field="min_racks_per_write_quorum",
    ),
    "numReplicationWorkers": Key(
        _int(1, 64), help="ledgers one autorecovery process repairs at once (2; pybookkeeper extension)",
        autorecovery_field="replication_workers",
    ),
    "openLedgerRereplicationGracePeriod": Key(
        _seconds_from_ms(0), help="ms an open ledger's writer gets to replace a lost bookie before the"
        " ledger is fenced (30000)", autorecovery_field="open_ledger_grace_s",
    ),
    # storage: directories
    "journalDirectories": Key(_dirs, "journal_dirs"),
    "journalDirectory": Key(_dirs, "journal_dirs", help="single journal directory (older key)"),
    "ledgerDirectories": Key(_dirs, "ledger_dirs"),
    # storage: journal
    "journalMaxGroupWaitMSec": Key(_float(0.0), "journal_max_group_wait_ms"),
    "journalBufferedWritesThreshold": Key(_int(1), "journal_buffered_writes_threshold"),
    "journalFlushWhenQueueEmpty": Key(_bool, "journal_flush_when_queue_empty"),
    "journalSyncData": Key(_bool, "journal_sync_data"),
    "journalRemoveFromPageCache": Key(_bool, "journal_remove_pages_from_cache"),
    "journalRemovePagesFromCache": Key(
        _bool, "journal_remove_pages_from_cache", help="older pybookkeeper name of journalRemoveFromPageCache"
    ),
    "journalPreAllocSizeMB": Key(_int(1), "journal_pre_alloc_size_mb"),
    "journalMaxSizeMB": Key(_int(1), "journal_max_size_mb"),
    "journalMaxBackups": Key(_int(0), "journal_max_backups"),
    "journalQueueSize": Key(_int(1), "journal_queue_size"),
    # storage: DbLedgerStorage
    "dbStorage_writeCacheMaxSizeMb": Key(_int(1), "write_cache_max_size_mb"),
    "dbStorage_maxThrottleTimeMs": Key(_int(0), "max_throttle_time_ms"),
    "dbStorage_readAheadCacheMaxSizeMb": Key(_int(1), "read_ahead_cache_max_size_mb"),
    "dbStorage_readAheadCacheBatchSize": Key(_int(1), "read_ahead_batch_size"),
    # RocksDB options of the ledger and location indexes (BookKeeper's DbLedgerStorage keys)
    "dbStorage_rocksDB_blockCacheSize": Key(
        _int(0), "rocksdb_block_cache_bytes", help="bytes of RocksDB block cache per index (RocksDB's 8 MiB)"
    ),
    "dbStorage_rocksDB_writeBufferSizeMB": Key(
        _int(1), "rocksdb_write_buffer_mb", help="MiB of RocksDB memtable per index (RocksDB's 64)"
    ),
    "dbStorage_rocksDB_blockSize": Key(
        _int(1024), "rocksdb_block_size", help="bytes per RocksDB data block (RocksDB's 4096)"
    ),
    "dbStorage_rocksDB_bloomFilterBitsPerKey": Key(
        _int(0), "rocksdb_bloom_bits_per_key", help="bits per key of the RocksDB bloom filter (0: none)"
    ),
    "logSizeLimit": Key(_int(1024 * 1024), "entry_log_size_limit"),
    "minUsableSizeForEntryLogCreation": Key(
        _int(0), "min_usable_for_entry_log_bytes",
        help="bytes a ledger directory needs free for a new entry log (1.2 x logSizeLimit)",
    ),
    "entryLogPageCacheMB": Key(
        _int(-1), "entry_log_page_cache_mb",
        help="MiB of each entry log kept in the OS page cache behind the write position; -1 = no limit"
        " (pybookkeeper extension; default 128)",
    ),
    "flushInterval": Key(_int(1), "flush_interval_ms"),
}
