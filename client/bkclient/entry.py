"""What readers get back: one verified ledger entry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


# the slot descriptors of LedgerEntry's fields
_new = object.__new__
_SlotSetter = Callable[[LedgerEntry, object], None]
_set_ledger_id: _SlotSetter = LedgerEntry.__dict__["ledger_id"].__set__
_set_entry_id: _SlotSetter = LedgerEntry.__dict__["entry_id"].__set__
_set_data: _SlotSetter = LedgerEntry.__dict__["data"].__set__


def ledger_entries(
    ledger_id: int, first_id: int, stride: int, payloads: Sequence[bytes]
) -> list[LedgerEntry]:
    """``LedgerEntry(ledger_id, first_id + i * stride, payloads[i])`` for each payload, as a range
    read makes them a thousand at a time. A frozen dataclass's ``__init__`` goes through
    ``object.__setattr__`` per field; filling the slots directly makes the same objects in about
    half the time."""
    out: list[LedgerEntry] = []
    append = out.append
    entry_id = first_id
    for payload in payloads:
        entry = _new(LedgerEntry)
        _set_ledger_id(entry, ledger_id)
        _set_entry_id(entry, entry_id)
        _set_data(entry, payload)
        append(entry)
        entry_id += stride
    return out


@dataclass(frozen=True, slots=True)
class LastConfirmedAndEntry:
    """Answer of a LAC long poll: the LAC learned and, when the LAC moved past the previous one,
    the entry right after it (piggybacked by the bookie, saving a round trip)."""

    last_add_confirmed: int
    entry: LedgerEntry | None

    @property
    def has_entry(self) -> bool:
        return self.entry is not None
