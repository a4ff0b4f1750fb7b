"""Recovery's replacements reach the metadata only through the close (``MetadataUpdateLoop``): one
CAS writes them together with CLOSED. On a conflict the close re-reads and goes on over metadata
whose ensembles are still the writer's; one whose ensembles another client changed is refused
(``test_recovery_replacement``)."""

from __future__ import annotations

import dataclasses

from tests.support.memory_cluster import LEDGER, PASSWORD, Writer, make_cluster, make_metadata

from bkclient.ops.recovery import LedgerRecoveryOp
from bkmeta.model import LedgerMetadata, LedgerState, Segment, Versioned


def recovery_racing_another_client(change: str) -> tuple[LedgerRecoveryOp, Writer, list[LedgerMetadata]]:
    """A recovery that must replace a dead bookie; just before its close is written, another client
    writes the metadata (``change``: "other" content with the same ensembles, or the "same")."""
    ctx = make_cluster(4)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids[:3], 2, 2))
    writer.write(6)
    ctx.bookies[ids[0]].down = True
    store = ctx.ledger_manager
    store.ledgers[LEDGER] = Versioned(writer.metadata, 1)
    real_write = store.write_ledger_metadata
    raced = False

    async def another_client_writes_first(
        ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        nonlocal raced
        current = store.ledgers[ledger_id]
        if md.state == LedgerState.CLOSED and not raced:
            raced = True
            value = current.value
            if change == "other":
                value = dataclasses.replace(value, custom_metadata={"by": b"another client"})
            store.ledgers[ledger_id] = Versioned(value, current.version + 1)
        return await real_write(ledger_id, md, expected_version)

    store.write_ledger_metadata = another_client_writes_first  # type: ignore[method-assign]
    return LedgerRecoveryOp(ctx, LEDGER, PASSWORD, writer.digest), writer, store.writes


def newcomer(md: LedgerMetadata) -> str:
    """The one bookie the closed ledger names that the writer's ensemble did not."""
    (chosen,) = set(md.last_ensemble) - set(md.segments[0].bookies)
    return chosen


async def test_a_replacement_is_written_only_with_the_close() -> None:
    op, writer, writes = recovery_racing_another_client("same")
    md = (await op.run()).value
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 5
    assert op.ensemble_changes == 1
    # IN_RECOVERY, then the close (twice: the first try met the other client's write). No write in
    # between named the replacement while the ledger was still in recovery.
    assert [m.state for m in writes] == [LedgerState.IN_RECOVERY, LedgerState.CLOSED]
    assert writes[0].segments == writer.metadata.segments
    _, b, c = writer.metadata.last_ensemble
    assert md.segments[0] == writer.metadata.segments[0]
    assert md.segments[1:] == (Segment(5, (newcomer(md), b, c)),)


async def test_a_close_over_other_changes_that_keep_the_ensembles_goes_on_and_keeps_them() -> None:
    op, writer, _ = recovery_racing_another_client("other")
    md = (await op.run()).value
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 5
    assert md.custom_metadata == {"by": b"another client"}
    _, b, c = writer.metadata.last_ensemble
    assert md.segments[0] == writer.metadata.segments[0]
    assert md.segments[1:] == (Segment(5, (newcomer(md), b, c)),)
