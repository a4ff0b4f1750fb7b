"""Bookie configuration: a ``bk_server.conf``-style file with BookKeeper's key names, overridden by
``BK_<key>`` environment variables, overridden by command-line flags.

Everything is typed and validated before the bookie starts: a key unknown to BookKeeper too, or a
bad value, is a :class:`ConfigError` naming the key, the value and where it came from, never a
silent default.
Keys that tune storage are handed to :class:`bookie.storage.config.StorageConfig` only when set, so
the storage layer keeps the defaults it was sized for.

Where settings come from, and which BookKeeper keys are accepted without being used, is
:mod:`bookie.config_sources`; an empty value leaves a key at its default, as in BookKeeper.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bookie.config_sources import (
    ConfigError,
    Setting,
    env_settings,
    flag_settings,
    parse_conf_file,
    sort_settings,
)
from bookie.gc.collector import GcSettings
from bookie.limits import ListenerLimits
from bookie.security import SecuritySettings, settings_from
from bookie.state_manager import ReadOnlySettings
from bookie.storage.config import StorageConfig

log = logging.getLogger(__name__)

# ConfigError is re-exported: callers import it from here
__all__ = ["KEYS", "AutoRecoverySettings", "BookieConfig", "ConfigError", "load_config"]

DEFAULT_JOURNAL_DIR = "/tmp/bk-txn"  # BookKeeper's defaults
DEFAULT_LEDGER_DIR = "/tmp/bk-data"
DEFAULT_ZK_SERVERS = "localhost:2181"
NO_ZK = "none"  # zkServers / --zk value that runs the bookie unregistered


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
        _int(1), help="add-port connections open at once from one IP address (64)",
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
        _seconds_from_ms(100), help="ms a peer may take to send a whole add-port frame (30000)",
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


@dataclass(frozen=True)
class AutoRecoverySettings:
    """What ``pybk autorecovery`` does when a bookie is lost (BookKeeper's keys in comments)."""

    lost_bookie_delay_s: float = 0.0  # lostBookieRecoveryDelay
    check_interval_s: float = 86_400.0  # auditorPeriodicBookieCheckInterval; 0: only on changes
    open_ledger_grace_s: float = 30.0  # openLedgerRereplicationGracePeriod
    replication_rate_bytes: int = 0  # replicationRateByBytes; 0 or less: no limit
    ledger_check_interval_s: float = 604_800.0  # auditorPeriodicCheckInterval; 0: off
    ledger_check_entries_per_s: int = 10_000  # auditorLedgerCheckEntriesPerSecond; 0: no limit
    rereplicate_backoff_s: float = 5.0  # rwRereplicateBackoffMs
    replication_workers: int = 2  # numReplicationWorkers: ledgers one process repairs at once
    placement_check_interval_s: float = 0.0  # auditorPeriodicPlacementPolicyCheckInterval; 0: off
    placement_policy: str = "random"  # ensemblePlacementPolicy: where copies go, what the check checks
    min_racks_per_write_quorum: int = 2  # minNumRacksPerWriteQuorum


@dataclass(frozen=True)
class BookieConfig:
    """The validated configuration of one bookie daemon."""

    port: int = 3181
    add_port: int = 0  # -1: no add port
    bind_address: str = "0.0.0.0"
    advertised_address: str = "127.0.0.1"
    rack: str = "/default-rack"
    http_enabled: bool = False
    http_port: int = 8080
    http_address: str = "127.0.0.1"  # httpServerHost: admin calls stay on this host unless opened
    zk_servers: str | None = DEFAULT_ZK_SERVERS  # None: run unregistered
    zk_timeout_ms: int = 10_000
    max_entry_bytes: int = 5 * 1024 * 1024
    shutdown_grace_s: float = 5.0
    gc: GcSettings = field(default_factory=GcSettings)
    read_only: ReadOnlySettings = field(default_factory=ReadOnlySettings)
    autorecovery: AutoRecoverySettings = field(default_factory=AutoRecoverySettings)
    limits: ListenerLimits = field(default_factory=ListenerLimits)
    journal_dirs: tuple[Path, ...] = (Path(DEFAULT_JOURNAL_DIR),)
    ledger_dirs: tuple[Path, ...] = (Path(DEFAULT_LEDGER_DIR),)
    # StorageConfig field -> value, for the storage keys that were set explicitly
    storage_overrides: Mapping[str, Any] = field(default_factory=dict)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    zk_enable_security: bool = False  # zkEnableSecurity
    zk_digest_file: Path | None = None  # zkDigestAuthFile
    zk_tls_trust: Path | None = None  # zkTlsTrustStore
    zk_tls_cert: Path | None = None  # zkTlsCertificatePath
    zk_tls_key: Path | None = None  # zkTlsKeyStore
    # the keys set (file, BK_ variable or flag) with their text and origin, for --print-config and
    # /api/v1/config/server_config; and BookKeeper's keys that were set but that pybookkeeper ignores
    settings: Mapping[str, Setting] = field(default_factory=dict, compare=False)
    ignored: Mapping[str, Setting] = field(default_factory=dict, compare=False)

    @property
    def bookie_id(self) -> str:
        return f"{self.advertised_address}:{self.port}"

    def storage_config(self) -> StorageConfig:
        """The storage layer's configuration for this bookie."""
        kwargs: dict[str, Any] = dict(self.storage_overrides)
        return StorageConfig(
            journal_dirs=list(self.journal_dirs), ledger_dirs=list(self.ledger_dirs), **kwargs
        )


def load_config(
    conf_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> BookieConfig:
    """Merge file < environment < ``overrides`` (command-line flags, by BookKeeper key name)."""
    layers: list[Mapping[str, Setting]] = []
    if conf_file is not None:
        layers.append(parse_conf_file(conf_file))
    layers.append(env_settings(environ or {}))
    layers.append(flag_settings(overrides or {}))
    settings = sort_settings(layers, KEYS)
    _drop_overridden_aliases(settings.used)
    config = _build(_typed(settings.used))
    return dataclasses.replace(config, settings=settings.used, ignored=settings.ignored)


def _typed(settings: Mapping[str, Setting]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, setting in settings.items():
        try:
            values[key] = KEYS[key].parse(setting.text)
        except ConfigError as exc:
            raise ConfigError(f"{setting.where}: bad value {setting.text!r} for {key}: {exc}") from None
    return values


# older key -> the key that replaced it; with both set, the one set last is the one that counts
_ALIASES = {
    "journalDirectory": "journalDirectories",
    "journalRemovePagesFromCache": "journalRemoveFromPageCache",
}


def _drop_overridden_aliases(settings: dict[str, Setting]) -> None:
    for older, newer in _ALIASES.items():
        if older in settings and newer in settings:
            del settings[min((older, newer), key=lambda k: _rank(settings[k].where))]


def _rank(where: str) -> tuple[int, int]:
    """Orders two settings' origins: file lines by number, then the environment, then flags."""
    if where == "command line":
        return (2, 0)
    if where.startswith("environment variable"):
        return (1, 0)
    line = where.rpartition(":")[2]
    return (0, int(line) if line.isdigit() else 0)


def _build(values: dict[str, Any]) -> BookieConfig:
    storage = {
        spec.storage_field: values[key]
        for key, spec in KEYS.items()
        if spec.storage_field is not None
        and key in values
        and spec.storage_field not in ("journal_dirs", "ledger_dirs")
    }
    journal = values.get("journalDirectories") or values.get("journalDirectory") or (DEFAULT_JOURNAL_DIR,)
    ledgers = values.get("ledgerDirectories") or (DEFAULT_LEDGER_DIR,)
    bind = values.get("bindAddress", "0.0.0.0")
    advertised = values.get("advertisedAddress") or (
        "127.0.0.1" if bind in ("0.0.0.0", "::", "[::]") else bind
    )
    config = BookieConfig(
        port=values.get("bookiePort", 3181),
        add_port=values.get("bookieAddPort", 0),
        bind_address=bind,
        advertised_address=advertised,
        rack=values.get("bookieRack", "/default-rack"),
        http_enabled=values.get("httpServerEnabled", False),
        http_port=values.get("httpServerPort", 8080),
        http_address=values.get("httpServerHost", "127.0.0.1"),
        zk_servers=_zk_servers(values),
        zk_timeout_ms=values.get("zkTimeout", 10_000),
        max_entry_bytes=values.get("nettyMaxFrameSizeBytes", 5 * 1024 * 1024),
        shutdown_grace_s=values.get("shutdownGracePeriodMs", 5000) / 1000.0,
        gc=_gc_settings(values),
        read_only=_read_only_settings(values, storage),
        autorecovery=AutoRecoverySettings(**{
            spec.autorecovery_field: values[key] for key, spec in KEYS.items()
            if spec.autorecovery_field and key in values
        }),
        limits=_limits(values),
        journal_dirs=tuple(Path(d) for d in journal),
        ledger_dirs=tuple(Path(d) for d in ledgers),
        storage_overrides=storage,
        security=_security(values),
        zk_enable_security=values.get("zkEnableSecurity", False),
        zk_digest_file=_path(values, "zkDigestAuthFile"),
        zk_tls_trust=_path(values, "zkTlsTrustStore"),
        zk_tls_cert=_path(values, "zkTlsCertificatePath"),
        zk_tls_key=_path(values, "zkTlsKeyStore"),
    )
    if config.zk_enable_security and config.zk_digest_file is None:
        raise ConfigError("zkEnableSecurity=true needs zkDigestAuthFile (the cluster's ZooKeeper identity)")
    _check_dirs(config)
    return config


def _path(values: Mapping[str, Any], key: str) -> Path | None:
    return Path(values[key]) if key in values else None


def _security(values: Mapping[str, Any]) -> SecuritySettings:
    try:
        return settings_from(values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _gc_settings(values: Mapping[str, Any]) -> GcSettings:
    fields = {spec.gc_field: values[key] for key, spec in KEYS.items() if spec.gc_field and key in values}
    try:
        return GcSettings(**fields)
    except ValueError as exc:  # a rule across keys, e.g. the minor threshold above the major one
        raise ConfigError(str(exc)) from None


def _limits(values: Mapping[str, Any]) -> ListenerLimits:
    fields = {spec.limits_field: values[key] for key, spec in KEYS.items()
              if spec.limits_field and key in values}
    try:
        return ListenerLimits(**fields)
    except ValueError as exc:  # a rule across keys, e.g. a per-IP limit above the total
        raise ConfigError(str(exc)) from None


def _read_only_settings(values: Mapping[str, Any], storage: Mapping[str, Any]) -> ReadOnlySettings:
    fields = {spec.read_only_field: values[key] for key, spec in KEYS.items()
              if spec.read_only_field and key in values}
    if "min_usable_high_priority_bytes" not in fields:  # BookKeeper's default: 1.2 x logSizeLimit
        log_size = storage.get("entry_log_size_limit", StorageConfig.entry_log_size_limit)
        fields["min_usable_high_priority_bytes"] = int(1.2 * log_size)
    if "warn_threshold" not in fields and "usage_threshold" in fields:
        # a full threshold set below the default warning one takes the warning down with it
        fields["warn_threshold"] = min(ReadOnlySettings.warn_threshold, fields["usage_threshold"])
    try:
        return ReadOnlySettings(**fields)
    except ValueError as exc:  # a rule across keys, e.g. the warn threshold above the full one
        raise ConfigError(str(exc)) from None


def _zk_servers(values: Mapping[str, Any]) -> str | None:
    """zkServers wins over metadataServiceUri; ``none`` disables registration."""
    servers: str | None = values.get("zkServers")
    if servers is None and "metadataServiceUri" in values:
        servers = zk_servers_from_uri(values["metadataServiceUri"])
    servers = servers or DEFAULT_ZK_SERVERS
    return None if servers.lower() == NO_ZK else servers


def zk_servers_from_uri(uri: str) -> str:
    """``zk+hierarchical://h1:2181;h2:2181/ledgers`` -> ``h1:2181,h2:2181``."""
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme.startswith("zk"):
        raise ConfigError(
            f"metadataServiceUri {uri!r}: expected zk[+<layout>]://host:port[;host:port]/ledgers"
        )
    hosts, _, root = rest.partition("/")
    if root.rstrip("/") not in ("", "ledgers"):
        raise ConfigError(f"metadataServiceUri {uri!r}: only the /ledgers root is supported")
    if not hosts:
        raise ConfigError(f"metadataServiceUri {uri!r} names no ZooKeeper host")
    return hosts.replace(";", ",")


def _check_dirs(config: BookieConfig) -> None:
    all_dirs = [*config.journal_dirs, *config.ledger_dirs]
    for d in all_dirs:
        if d.exists() and not d.is_dir():
            raise ConfigError(f"{d} is configured as a bookie directory but is not a directory")
    for key, dirs in (("journalDirectories", config.journal_dirs), ("ledgerDirectories", config.ledger_dirs)):
        resolved = [d.resolve() for d in dirs]
        if len(set(resolved)) != len(resolved):
            raise ConfigError(f"{key} lists a directory twice: {', '.join(map(str, dirs))}")
