"""The writer's two metadata updates, each a compare-and-set loop (``MetadataUpdateLoop``): a new
last segment after bookies failed (ensemble change), and closing the ledger at the writer's LAC.
BookKeeper's rules: another client's recovery (IN_RECOVERY) fences the writer, a ledger closed by
someone else ends it, a close at the same point already made is success."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkmeta.update_loop import MetadataUpdateLoop
from bkproto.errors import LedgerClosedError, LedgerFencedError, MetadataVersionError

if TYPE_CHECKING:
    from bkmeta.ledger_manager import LedgerManager

# Picks the bookie replacing ``ensemble[index]``, given the ensemble and the write quorum.
PickReplacement = Callable[[list[str], int, int], str]


async def replace_failed_bookies(
    ledger_manager: LedgerManager,
    ledger_id: int,
    current: Versioned[LedgerMetadata],
    failed: Mapping[int, str],
    first_entry: int,
    pick: PickReplacement,
) -> Versioned[LedgerMetadata]:
    """CAS a new last segment from ``first_entry`` on with the ``failed`` bookies (by index)
    replaced; after a conflict, again over the metadata read (replacements picked anew)."""

    def still_writable(md: LedgerMetadata) -> bool:
        if md.state == LedgerState.IN_RECOVERY:
            raise LedgerFencedError(f"ledger {ledger_id} is being recovered by another client")
        if md.state == LedgerState.CLOSED:
            raise LedgerClosedError(f"ledger {ledger_id} was closed by another client")
        return True

    def replaced(md: LedgerMetadata) -> LedgerMetadata:
        ensemble = list(md.last_ensemble)
        for index, bookie_id in failed.items():
            if ensemble[index] == bookie_id:
                ensemble[index] = pick(ensemble, index, md.write_quorum_size)
        return md.with_ensemble_change(first_entry, tuple(ensemble))

    return await MetadataUpdateLoop(
        ledger_manager, ledger_id, needs_transformation=still_writable, transform=replaced, current=current
    ).run()


async def close_at(
    ledger_manager: LedgerManager, ledger_id: int, current: Versioned[LedgerMetadata], lac: int, length: int
) -> Versioned[LedgerMetadata]:
    """CAS the metadata OPEN -> CLOSED at entry ``lac`` and ``length`` bytes."""

    def needs_closing(md: LedgerMetadata) -> bool:
        if md.state == LedgerState.CLOSED:
            if md.last_entry_id == lac and md.length == length:
                return False  # closed already, at this writer's point: success
            raise MetadataVersionError(
                f"ledger {ledger_id} was closed at entry {md.last_entry_id} "
                f"(length {md.length}), this writer's LAC is {lac} (length {length})"
            )
        if md.state == LedgerState.IN_RECOVERY:
            raise LedgerFencedError(f"ledger {ledger_id} is being recovered by another client")
        return True

    return await MetadataUpdateLoop(
        ledger_manager,
        ledger_id,
        needs_transformation=needs_closing,
        transform=lambda md: md.with_closed(lac, length),
        current=current,
    ).run()
