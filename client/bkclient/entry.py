"""What readers get back: one verified ledger entry."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat


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
    ``object.__setattr__`` per field; here the objects are made, then each slot filled, in
    C-level passes (``map`` over the slot setters), without a Python step per entry."""
    count = len(payloads)
    out = list(map(_new, repeat(LedgerEntry, count)))
    _drain(map(_set_ledger_id, out, repeat(ledger_id, count)))
    _drain(map(_set_entry_id, out, range(first_id, first_id + count * stride, stride)))
    _drain(map(_set_data, out, payloads))
    return out


def _drain(steps: Iterable[None]) -> None:
    """Run an iterator of setter calls to its end, keeping nothing."""
    deque(steps, maxlen=0)


@dataclass(frozen=True, slots=True)
class LastConfirmedAndEntry:
    """Answer of a LAC long poll: the LAC learned and, when the LAC moved past the previous one,
    the entry right after it (piggybacked by the bookie, saving a round trip)."""

    last_add_confirmed: int
    entry: LedgerEntry | None

    @property
    def has_entry(self) -> bool:
        return self.entry is not None
