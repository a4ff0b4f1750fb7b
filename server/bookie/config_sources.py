"""Where a bookie's settings come from: a ``bk_server.conf``-style file, ``BK_<key>`` environment
variables and command-line flags, each setting remembered with its origin (``file:line``, the
variable's name, ``command line``) so that errors and ``pybk bookie --print-config`` can name it.

Keys are checked against two lists: the keys pybookkeeper uses (``bookie.config.KEYS``) and every
key Apache BookKeeper knows (``bookie.bk_keys``). A key BookKeeper knows that pybookkeeper does not
use is accepted and kept aside, so that a stock BookKeeper or Pulsar file starts a bookie unchanged
and the daemon can say once which keys it ignores; a key neither knows is a typo until proven
otherwise and is refused with the closest known key.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bookie.bk_keys import BOOKKEEPER_KEYS

ENV_PREFIX = "BK_"
COMMAND_LINE = "command line"


class ConfigError(ValueError):
    """A configuration problem the operator must fix; the daemon exits with code 2."""


@dataclass(frozen=True)
class Setting:
    """One key's text as written, and where it was written."""

    text: str
    where: str


def parse_conf_file(path: Path) -> dict[str, Setting]:
    """``key -> Setting`` from a properties file: ``key=value`` lines, ``#``/``!`` comments.

    An empty value (``advertisedAddress=``, as Pulsar's stock file has) leaves the key unset, as
    BookKeeper reads it; the last of two lines with one key wins, as in Java's Properties."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    settings: dict[str, Setting] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        settings[key.strip()] = Setting(value.strip(), f"{path}:{number}")
    return settings


def env_settings(environ: Mapping[str, str]) -> dict[str, Setting]:
    """Every ``BK_<key>`` whose key starts with a lower-case letter, as BookKeeper's docker image
    reads them (``BK_journalDirectories=/data/journal``); ``BK_HOME`` and such belong to scripts."""
    settings: dict[str, Setting] = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) : len(ENV_PREFIX) + 1].islower():
            settings[name[len(ENV_PREFIX) :]] = Setting(value.strip(), f"environment variable {name}")
    return settings


def flag_settings(overrides: Mapping[str, str]) -> dict[str, Setting]:
    return {key: Setting(value, COMMAND_LINE) for key, value in overrides.items()}


@dataclass(frozen=True)
class Sorted:
    """The merged settings: the ones pybookkeeper uses, and BookKeeper's ones it does not."""

    used: dict[str, Setting]
    ignored: dict[str, Setting]


def sort_settings(layers: Iterable[Mapping[str, Setting]], used_keys: Collection[str]) -> Sorted:
    """Merge ``layers`` (later ones win) and sort each key into used or ignored; an empty value
    unsets the key (a later layer can so clear an earlier one). Raises :class:`ConfigError` for a
    key neither pybookkeeper nor BookKeeper knows, naming where it was set and the closest key."""
    used: dict[str, Setting] = {}
    ignored: dict[str, Setting] = {}
    for layer in layers:
        for key, setting in layer.items():
            if key in used_keys:
                target = used
            elif key in BOOKKEEPER_KEYS:
                target = ignored
            else:
                hint = _suggestion(key, used_keys)
                raise ConfigError(f"{setting.where}: unknown configuration key {key!r}{hint}")
            if setting.text:
                target[key] = setting
            else:
                target.pop(key, None)
    return Sorted(used, ignored)


def _suggestion(key: str, used_keys: Collection[str]) -> str:
    candidates = {name.lower(): name for name in (*BOOKKEEPER_KEYS, *used_keys)}
    close = difflib.get_close_matches(key.lower(), list(candidates), n=1, cutoff=0.75)
    return f" (did you mean {candidates[close[0]]!r}?)" if close else ""


def ignored_line(ignored: Mapping[str, Setting]) -> str:
    """The one line the daemon logs at start about BookKeeper keys it accepts and does not use."""
    return (
        f"{len(ignored)} BookKeeper configuration keys accepted but not used by pybookkeeper"
        f" (docs/configuration.md says why): {', '.join(sorted(ignored))}"
    )
