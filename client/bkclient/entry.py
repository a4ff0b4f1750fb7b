"""What readers get back: one verified ledger entry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One entry of a ledger, digest already verified. ``data`` is the application payload
    (without BookKeeper's header and digest)."""

    ledger_id: int
    entry_id: int
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class LastConfirmedAndEntry:
    """Answer of a LAC long poll: the LAC learned and, when the LAC moved past the previous one,
    the entry right after it (piggybacked by the bookie, saving a round trip)."""

    last_add_confirmed: int
    entry: LedgerEntry | None

    @property
    def has_entry(self) -> bool:
        return self.entry is not None
