"""Ledger metadata as immutable values (BookKeeper's ``LedgerMetadata``), validated on construction.

Every change makes a new value (``with_state``, ``with_closed``, ``with_ensemble_change``) that the
caller then compare-and-sets into ZooKeeper with the version it read (:class:`Versioned`).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Generic, TypeVar

from bkproto.errors import IncorrectParameterError

T = TypeVar("T")


class DigestType(IntEnum):
    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


class LedgerState(IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True)
class Segment:
    """From ``first_entry_id`` on (until the next segment), entries go to ``bookies``."""

    first_entry_id: int
    bookies: tuple[str, ...]


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value with the ZooKeeper znode version it was read at (the CAS token)."""

    value: T
    version: int


def _freeze(custom: Mapping[str, bytes]) -> Mapping[str, bytes]:
    return MappingProxyType(dict(custom))


@dataclass(frozen=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: LedgerState
    last_entry_id: int  # -1 when the ledger has no entry (or is not closed yet)
    length: int
    digest_type: DigestType
    password: bytes
    ctime: int  # creation time, ms since the epoch
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    segments: tuple[Segment, ...] = ()
    c_token: int = 0

    def __post_init__(self) -> None:
        # Normalise inputs so equal metadata compares equal and cannot be mutated behind our back.
        object.__setattr__(self, "state", LedgerState(self.state))
        object.__setattr__(self, "digest_type", DigestType(self.digest_type))
        object.__setattr__(self, "password", bytes(self.password))
        object.__setattr__(self, "custom_metadata", _freeze(self.custom_metadata))
        object.__setattr__(
            self, "segments", tuple(Segment(s.first_entry_id, tuple(s.bookies)) for s in self.segments)
        )
        self._validate()

    @classmethod
    def decoded(
        cls,
        *,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        state: LedgerState,
        last_entry_id: int,
        length: int,
        digest_type: DigestType,
        password: bytes,
        ctime: int,
        custom_metadata: dict[str, bytes],
        segments: tuple[Segment, ...],
        c_token: int,
    ) -> LedgerMetadata:
        """A value from a decoder whose fields already have their final types (enums, ``bytes``,
        a fresh dict nobody else holds, a tuple of ``Segment`` with tuples of bookies): validated
        like any other, without the copies ``__post_init__`` makes of what a caller passed (a
        cold metadata read is on the hot path of opening a ledger)."""
        md = object.__new__(cls)
        md.__dict__.update(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            state=state,
            last_entry_id=last_entry_id,
            length=length,
            digest_type=digest_type,
            password=password,
            ctime=ctime,
            custom_metadata=MappingProxyType(custom_metadata),
            segments=segments,
            c_token=c_token,
        )
        md._validate()
        return md

    def _validate(self) -> None:
        e, qw, qa = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        if not e >= qw >= qa >= 1:
            raise IncorrectParameterError(
                f"need ensemble >= write quorum >= ack quorum >= 1, got E={e} Qw={qw} Qa={qa}"
            )
        if self.last_entry_id < -1:
            raise IncorrectParameterError(f"last entry id {self.last_entry_id} < -1")
        if self.length < 0:
            raise IncorrectParameterError(f"negative length {self.length}")
        if not self.segments:
            raise IncorrectParameterError("ledger metadata needs at least one ensemble segment")
        if self.segments[0].first_entry_id != 0:
            raise IncorrectParameterError("the first segment must start at entry 0")
        previous = -1
        for seg in self.segments:
            if seg.first_entry_id <= previous:
                raise IncorrectParameterError(
                    f"segments must be sorted by first entry id: {seg.first_entry_id} after {previous}"
                )
            previous = seg.first_entry_id
            if len(seg.bookies) != e:
                raise IncorrectParameterError(
                    f"segment at entry {seg.first_entry_id} has {len(seg.bookies)} bookies, ensemble is {e}"
                )
            if len(set(seg.bookies)) != len(seg.bookies):
                raise IncorrectParameterError(f"segment at entry {seg.first_entry_id} repeats a bookie")
        for key, value in self.custom_metadata.items():
            if not isinstance(key, str) or not isinstance(value, bytes | bytearray):
                raise IncorrectParameterError("custom metadata must map str to bytes")

    # -- queries ----------------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.segments[-1].bookies

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The bookies of the segment that holds ``entry_id``."""
        if entry_id < 0:
            return self.segments[0].bookies
        starts = [s.first_entry_id for s in self.segments]
        return self.segments[bisect.bisect_right(starts, entry_id) - 1].bookies

    def all_bookies(self) -> frozenset[str]:
        return frozenset(b for s in self.segments for b in s.bookies)

    # -- changes (new values) ---------------------------------------------------------------------

    def with_state(self, state: LedgerState) -> LedgerMetadata:
        return dataclasses.replace(self, state=state)

    def with_closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return dataclasses.replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def with_ensemble_change(self, first_entry_id: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """Entries from ``first_entry_id`` on go to ``bookies``. If the last segment starts at the
        same entry (a second failure before any entry was written to it) it is replaced."""
        last = self.segments[-1]
        if first_entry_id < last.first_entry_id:
            raise IncorrectParameterError(
                f"ensemble change at entry {first_entry_id} is before the last segment "
                f"({last.first_entry_id})"
            )
        new = Segment(first_entry_id, tuple(bookies))
        if first_entry_id == last.first_entry_id:
            segments = (*self.segments[:-1], new)
        else:
            segments = (*self.segments, new)
        return dataclasses.replace(self, segments=segments)

    def replace_bookie(self, segment_first_entry_id: int, old: str, new: str) -> LedgerMetadata:
        """Swap ``old`` for ``new`` in one segment (re-replication of a closed ledger)."""
        segments = tuple(
            Segment(s.first_entry_id, tuple(new if b == old else b for b in s.bookies))
            if s.first_entry_id == segment_first_entry_id
            else s
            for s in self.segments
        )
        return dataclasses.replace(self, segments=segments)
