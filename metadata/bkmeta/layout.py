"""BookKeeper's ZooKeeper paths under the ledgers root (reference §2.5).

Ledger znodes use the hierarchical layout: ids below ``Integer.MAX_VALUE`` (2^31-1) are formatted
``%010d`` and split 2-4-4 (``/ledgers/00/0000/L0001``); larger ids use the long-hierarchical layout,
``%019d`` split 3-4-4-4-4 (``/ledgers/000/0000/0000/0000/L0001``), as
``StringUtils.getHybridHierarchicalLedgerPath`` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

LAYOUT_ZNODE = "LAYOUT"
INSTANCEID_ZNODE = "INSTANCEID"
AVAILABLE_ZNODE = "available"
READONLY_ZNODE = "readonly"
COOKIES_ZNODE = "cookies"
UNDERREPLICATION_ZNODE = "underreplication"
IDGEN_ZNODE = "idgen"
IDGEN_LONG_ZNODE = "idgen-long"
IDGEN_PREFIX = "ID-"
HOB_PREFIX = "HOB-"
LEDGER_PREFIX = "L"

# Top-level children of the root that are never ledger-range directories.
RESERVED_ZNODES = frozenset(
    {
        LAYOUT_ZNODE,
        INSTANCEID_ZNODE,
        AVAILABLE_ZNODE,
        COOKIES_ZNODE,
        UNDERREPLICATION_ZNODE,
        IDGEN_ZNODE,
        IDGEN_LONG_ZNODE,
    }
)


class BadLedgerPathError(ValueError):
    """A path that is not a ledger znode of this layout."""


def check_ledger_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= LONG_MAX:
        raise ValueError(f"ledger id {ledger_id} is outside 0..2^63-1")


def ledger_relative_path(ledger_id: int) -> str:
    """``00/0000/L0001`` for a short id, ``000/0000/0000/0000/L0001`` for a long one."""
    check_ledger_id(ledger_id)
    if ledger_id < INT_MAX:
        s = f"{ledger_id:010d}"
        return f"{s[0:2]}/{s[2:6]}/{LEDGER_PREFIX}{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/{LEDGER_PREFIX}{s[15:19]}"


def parse_ledger_relative_path(rel: str) -> int:
    """Inverse of :func:`ledger_relative_path`; raises :class:`BadLedgerPathError`."""
    parts = rel.strip("/").split("/")
    widths = [2, 4, 4] if len(parts) == 3 else [3, 4, 4, 4, 4] if len(parts) == 5 else None
    if widths is None or not parts[-1].startswith(LEDGER_PREFIX):
        raise BadLedgerPathError(f"not a ledger path: {rel!r}")
    parts = [*parts[:-1], parts[-1][len(LEDGER_PREFIX) :]]
    if any(len(p) != w or not p.isdigit() for p, w in zip(parts, widths, strict=True)):
        raise BadLedgerPathError(f"not a ledger path: {rel!r}")
    ledger_id = int("".join(parts))
    if ledger_relative_path(ledger_id) != "/".join([*parts[:-1], LEDGER_PREFIX + parts[-1]]):
        # e.g. a short-layout path for an id that must use the long layout
        raise BadLedgerPathError(f"ledger path {rel!r} does not match its id's layout")
    return ledger_id


@dataclass(frozen=True)
class ZkLayout:
    """Absolute paths for one cluster rooted at ``root`` (``/ledgers`` by default)."""

    root: str = "/ledgers"

    def __post_init__(self) -> None:
        if not self.root.startswith("/") or (self.root != "/" and self.root.endswith("/")):
            raise ValueError(f"ledgers root must be absolute without a trailing slash: {self.root!r}")

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def layout(self) -> str:
        return self._join(LAYOUT_ZNODE)

    @property
    def instance_id(self) -> str:
        return self._join(INSTANCEID_ZNODE)

    @property
    def available(self) -> str:
        return self._join(AVAILABLE_ZNODE)

    @property
    def readonly(self) -> str:
        return self._join(AVAILABLE_ZNODE, READONLY_ZNODE)

    @property
    def cookies(self) -> str:
        return self._join(COOKIES_ZNODE)

    @property
    def underreplication(self) -> str:
        return self._join(UNDERREPLICATION_ZNODE)

    @property
    def auditor_leader(self) -> str:
        """The leading autorecovery's ephemeral znode; its content says who it is."""
        return self._join(UNDERREPLICATION_ZNODE, "auditorelection", "leader")

    @property
    def idgen(self) -> str:
        return self._join(IDGEN_ZNODE)

    @property
    def idgen_prefix(self) -> str:
        return self._join(IDGEN_ZNODE, IDGEN_PREFIX)

    @property
    def idgen_long(self) -> str:
        return self._join(IDGEN_LONG_ZNODE)

    def idgen_long_hob(self, high_bits: int) -> str:
        return self._join(IDGEN_LONG_ZNODE, f"{HOB_PREFIX}{high_bits:010d}")

    def writable_bookie(self, bookie_id: str) -> str:
        return self._join(AVAILABLE_ZNODE, bookie_id)

    def readonly_bookie(self, bookie_id: str) -> str:
        return self._join(AVAILABLE_ZNODE, READONLY_ZNODE, bookie_id)

    def cookie(self, bookie_id: str) -> str:
        return self._join(COOKIES_ZNODE, bookie_id)

    @functools.cached_property
    def _ledger_prefix(self) -> str:
        return self._join("")

    def ledger(self, ledger_id: int) -> str:
        return self._ledger_prefix + ledger_relative_path(ledger_id)

    def parse_ledger(self, path: str) -> int:
        prefix = self.root.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise BadLedgerPathError(f"{path!r} is not under {self.root!r}")
        return parse_ledger_relative_path(path[len(prefix) :])
