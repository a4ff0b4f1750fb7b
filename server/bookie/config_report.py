"""The effective configuration of a bookie, key by key, with where each value came from: what
``pybk bookie --print-config`` prints and ``GET /api/v1/config/server_config`` answers.

A key that was set shows its text as written and its origin (``file:line``, ``environment variable
BK_<key>``, ``command line``); a key left alone shows the default the bookie runs with, read back
from the built configuration so that it cannot drift from the code. BookKeeper keys that were set
but that pybookkeeper does not use are listed apart, so an operator sees at once what has no effect.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bookie.config import BookieConfig
from bookie.config_keys import KEYS, MS_PARSERS

DEFAULT = "default"
IGNORED = "ignored"  # set, known to BookKeeper, unused by pybookkeeper

# daemon keys -> BookieConfig attribute (the storage, gc, read-only and autorecovery keys say theirs)
_DAEMON_FIELDS = {
    "bookiePort": "port",
    "bookieAddPort": "add_port",
    "bindAddress": "bind_address",
    "advertisedAddress": "advertised_address",
    "bookieRack": "rack",
    "httpServerEnabled": "http_enabled",
    "httpServerPort": "http_port",
    "httpServerHost": "http_address",
    "zkServers": "zk_servers",
    "zkTimeout": "zk_timeout_ms",
    "nettyMaxFrameSizeBytes": "max_entry_bytes",
    "shutdownGracePeriodMs": "shutdown_grace_s",
    "zkEnableSecurity": "zk_enable_security",
}


@dataclass(frozen=True)
class EffectiveSetting:
    key: str
    value: str  # as a bk_server.conf line would write it; "" for a key with no value (unset)
    source: str  # "default", "ignored", or where it was set
    used: bool  # False: a BookKeeper key pybookkeeper accepts and does not use


def effective_settings(config: BookieConfig) -> list[EffectiveSetting]:
    """Every key pybookkeeper uses, then every ignored BookKeeper key that was set, by name."""
    rows = []
    for key in sorted(KEYS, key=str.lower):
        setting = config.settings.get(key)
        if setting is not None:
            rows.append(EffectiveSetting(key, setting.text, setting.where, True))
        else:
            rows.append(EffectiveSetting(key, _default_text(config, key), DEFAULT, True))
    for key in sorted(config.ignored, key=str.lower):
        ignored = config.ignored[key]
        rows.append(EffectiveSetting(key, ignored.text, f"{IGNORED} ({ignored.where})", False))
    return rows


def _default_text(config: BookieConfig, key: str) -> str:
    spec = KEYS[key]
    holder: Any
    if spec.storage_field is not None:
        holder, name = config.storage_config(), spec.storage_field
    elif spec.gc_field is not None:
        holder, name = config.gc, spec.gc_field
    elif spec.read_only_field is not None:
        holder, name = config.read_only, spec.read_only_field
    elif spec.autorecovery_field is not None:
        holder, name = config.autorecovery, spec.autorecovery_field
    elif spec.limits_field is not None:
        holder, name = config.limits, spec.limits_field
    elif key in _DAEMON_FIELDS:
        holder, name = config, _DAEMON_FIELDS[key]
    else:
        return ""  # no value: the feature it configures is off (TLS, authentication, ...)
    value = getattr(holder, name)
    if key == "zkServers" and value is None:
        return "none"
    if spec.parse in MS_PARSERS or key == "shutdownGracePeriodMs":
        value = round(value * 1000) if value >= 0 else -1  # negative: "no limit", written -1
    return _text(value)


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ",".join(_text(item) for item in value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def render_text(rows: Iterable[EffectiveSetting]) -> str:
    """``key=value  # source`` lines, ignored keys commented out. Not a configuration file as it
    stands (properties files have no trailing comments): cut each line at `` # `` to make one."""
    lines = []
    for row in rows:
        line = f"{row.key}={row.value}"
        lines.append(f"{line:<60} # {row.source}" if row.used else f"# {line:<58} # {row.source}")
    return "\n".join(lines) + "\n"


def render_json(rows: Iterable[EffectiveSetting]) -> str:
    return json.dumps(
        [{"key": r.key, "value": r.value, "source": r.source, "used": r.used} for r in rows], indent=2
    )


def server_config(config: BookieConfig) -> Mapping[str, str]:
    """``GET /api/v1/config/server_config``: BookKeeper answers a JSON object of key -> value
    string; here every key with a value, pybookkeeper's own and the ignored ones alike."""
    return {row.key: row.value for row in effective_settings(config) if row.value}
