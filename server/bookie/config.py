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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bookie.config_keys import KEYS
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

    @property
    def tls_enabled(self) -> bool:
        """Every listener speaks only TLS (advertised in the bookie's registration)."""
        return self.security.tls is not None

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
