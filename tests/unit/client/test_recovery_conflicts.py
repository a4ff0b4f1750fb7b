"""Recovery's ensemble change on a metadata conflict (it goes through ``MetadataUpdateLoop``):
metadata another client changed fails the recovery instead of being retried over, as before the
loop; only a rewrite of the very same metadata is gone on from."""

from __future__ import annotations

import dataclasses

import pytest
from tests.unit.client.test_read_fakes import LEDGER, PASSWORD, Writer, make_cluster, make_metadata

from bkclient.ops.recovery import LedgerRecoveryOp
from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkproto.errors import LedgerRecoveryError


def recovery_racing_another_client(change: str) -> tuple[LedgerRecoveryOp, list[LedgerMetadata]]:
    """A recovery that must replace a dead bookie; just before its ensemble change is written,
    another client writes the metadata (``change``: "other" content, or the "same")."""
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
        if len(md.segments) == 2 and not raced:
            raced = True
            value = current.value
            if change == "other":
                value = dataclasses.replace(value, custom_metadata={"by": b"another client"})
            store.ledgers[ledger_id] = Versioned(value, current.version + 1)
        return await real_write(ledger_id, md, expected_version)

    store.write_ledger_metadata = another_client_writes_first  # type: ignore[method-assign]
    return LedgerRecoveryOp(ctx, LEDGER, PASSWORD, writer.digest), store.writes


async def test_an_ensemble_change_conflicting_with_other_metadata_fails_the_recovery() -> None:
    op, writes = recovery_racing_another_client("other")
    with pytest.raises(LedgerRecoveryError, match="metadata changed during recovery"):
        await op.run()
    assert [md.state for md in writes] == [LedgerState.IN_RECOVERY]  # nothing written after
    assert op.ensemble_changes == 0


async def test_an_ensemble_change_over_a_rewrite_of_the_same_metadata_goes_on() -> None:
    op, writes = recovery_racing_another_client("same")
    md = (await op.run()).value
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 5
    assert op.ensemble_changes == 1
    assert len(writes) == 3  # IN_RECOVERY, the ensemble change (second try), CLOSED
