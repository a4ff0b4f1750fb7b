"""The contract between the gRPC layer (``bookie.service`` / ``bookie.handlers``) and the bookie
core (``bookie.bookie.Bookie`` over ``bookie.storage``).

Handlers translate protobuf messages to these plain types and call :class:`BookieCore`; the core
owns every rule (master key, fencing, LAC, durability) and raises :class:`~bookie.errors.BookieError`
with a BookKeeper status code for anything a client did wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from bkproto.entry_format import HEADER_SIZE
from bkproto.v1 import bookie_pb2


class AddOp(NamedTuple):
    """One add as the core sees it. A NamedTuple rather than a frozen dataclass: one is built per
    entry on the bookie's hottest path, and a frozen dataclass's ``__init__`` (``object.__setattr__``
    per field) costs about three times a NamedTuple's, a visible share of the bookie's GIL time
    (figures in docs/performance.md)."""

    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes  # full entry body: 32-byte header || digest || payload
    recovery: bool = False  # RECOVERY_ADD: allowed on a fenced ledger
    deferred_sync: bool = False  # DEFERRED_SYNC: ack after write, before fsync


@dataclass(frozen=True, slots=True)
class AddResult:
    status: int  # bookie_pb2.StatusCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class LacInfo:
    explicit_lac_body: bytes | None  # the last WriteLac body, if any
    last_entry_body: bytes | None  # the last stored entry, if any


@dataclass(frozen=True, slots=True)
class DiskInfo:
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True, slots=True)
class LogMark:
    journal_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class JournalMark:
    """A journal dir and its persisted LastLogMark."""

    journal_dir: Path
    mark: LogMark


class BookieCore(Protocol):
    """What request handlers need from the bookie. All coroutines run on the bookie's event loop."""

    @property
    def read_only(self) -> bool: ...

    async def add_entries(self, ops: Sequence[AddOp]) -> list[AddResult]:
        """Add a batch. One result per op, same order; returns once every EOK op is durable
        (journal fsync, unless ``deferred_sync``). Invalid ops get their own status without
        affecting the others. Raises nothing for per-op problems.

        The core is where an add's shape is checked, once: an op :func:`malformed_add` refuses
        gets that EBADREQ, and on a read-only bookie an op that is not a recovery add gets
        EREADONLY, whatever else happens to the batch. The handlers check only what the core
        cannot see (a master key present at all, the configured size limit)."""
        ...

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The stored body; ``entry_id == -1`` means the last entry stored for the ledger."""
        ...

    async def read_entries(
        self,
        ledger_id: int,
        first_entry_id: int,
        max_count: int,
        max_bytes: int,
        *,
        stride: int = 1,
        last_entry_id: int | None = None,
    ) -> list[bytes]:
        """Bodies of ``first_entry_id``, ``first_entry_id + stride``, ... up to ``last_entry_id``;
        stops at the first missing entry, at ``max_count`` entries or before exceeding
        ``max_bytes`` (always >= 1 if the first exists; ENOENTRY/ENOLEDGER if it does not)."""
        ...

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Fence durably (journaled and fsynced before return). Creates the ledger record with
        ``master_key`` if the bookie has never seen the ledger, so a lagging writer is refused."""
        ...

    def last_add_confirmed(self, ledger_id: int) -> int:
        """The bookie's known LAC (max of piggybacked and explicit LAC); -1 if none."""
        ...

    def lac_update_timestamp(self, ledger_id: int) -> int:
        """Milliseconds since the epoch of the last LAC increase (0 if never)."""
        ...

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        """Park until the LAC exceeds ``previous_lac`` or the timeout passes; return the LAC.
        No busy polling: woken by the add / write-LAC that moves the LAC."""
        ...

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> None: ...

    async def read_lac(self, ledger_id: int) -> LacInfo: ...

    async def force_ledger(self, ledger_id: int) -> None:
        """Return once every entry of the ledger accepted so far is durable."""
        ...

    def disk_info(self) -> DiskInfo: ...

    async def list_entries(self, ledger_id: int) -> list[tuple[int, int]]:
        """Inclusive runs (first, last) of stored entry ids, sorted."""
        ...

    def last_log_marks(self) -> list[JournalMark]:
        """The persisted LastLogMark of each journal dir, in configuration order."""
        ...


# The entry header's first two longs, the ids it is for (bkproto.entry_format.HEADER's prefix).
_HEADER_IDS = struct.Struct(">qq")


def malformed_add(op: AddOp) -> AddResult | None:
    """EBADREQ, with the reason, for an add whose ids are negative, whose body is shorter than the
    entry header, or whose header names another entry than the request; ``None`` if none of these.

    Part of :meth:`BookieCore.add_entries`'s contract, so that every core refuses these adds
    alike; the bookie core inlines the same checks on its fast path and calls this to explain a
    refusal."""
    ledger_id = op.ledger_id
    entry_id = op.entry_id
    if ledger_id < 0 or entry_id < 0:
        return AddResult(
            bookie_pb2.EBADREQ, f"ledger id {ledger_id} and entry id {entry_id} must not be negative"
        )
    size = len(op.body)
    if size < HEADER_SIZE:
        return AddResult(
            bookie_pb2.EBADREQ,
            f"entry {entry_id} of ledger {ledger_id}: body of {size} bytes is shorter than"
            f" the {HEADER_SIZE}-byte entry header",
        )
    header_ledger, header_entry = _HEADER_IDS.unpack_from(op.body)
    if header_ledger != ledger_id or header_entry != entry_id:
        return AddResult(
            bookie_pb2.EBADREQ,
            f"entry header says ledger {header_ledger} entry {header_entry} but the request"
            f" is for ledger {ledger_id} entry {entry_id}",
        )
    return None
