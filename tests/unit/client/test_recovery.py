"""Ledger recovery against memory bookies and a CAS store: fencing, where the ledger ends, re-adds,
ensemble change during recovery, races on the metadata."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.memory_cluster import (
    LEDGER,
    PASSWORD,
    FakeContext,
    Writer,
    make_cluster,
    make_metadata,
    payload,
)
from tests.support.memory_recovery import recovery_op

from bkclient.ops.read import write_set_bookies
from bkclient.ops.recovery import LedgerRecoveryOp
from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkproto.errors import LedgerFencedError, LedgerRecoveryError, UnauthorizedAccessError


def length_through(entry_id: int) -> int:
    return sum(len(payload(i)) for i in range(entry_id + 1))


def states(ctx: FakeContext) -> list[LedgerState]:
    return [md.state for md in ctx.ledger_manager.writes]


async def test_closes_at_last_entry_that_exists_and_fences_every_bookie() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(10)  # entries 0..9; LAC 8 is piggybacked in entry 9
    result = await recovery_op(ctx, writer).run()
    md = result.value
    assert md.state == LedgerState.CLOSED
    assert md.last_entry_id == 9
    assert md.length == length_through(9)
    assert states(ctx) == [LedgerState.IN_RECOVERY, LedgerState.CLOSED]
    assert all(LEDGER in b.fenced for b in ctx.bookies.values())
    # The writer is fenced out: its next ordinary add fails.
    bookie = next(iter(ctx.bookies.values()))
    with pytest.raises(LedgerFencedError):
        await bookie.add(LEDGER, 10, writer.digest.master_key, writer.body(10))


async def test_entry_on_a_minority_can_be_dropped_but_nothing_after_a_gap_survives() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 3, 2))
    writer.write(5)
    # Entry 5 reached only one of three bookies (never acknowledged with Qa=2): two replicas
    # saying "no such entry" prove it absent. Entry 6 reached all three, but it comes after the gap.
    holder = write_set_bookies(writer.metadata, 5)[0]
    writer.write(1, skip=set(ctx.bookies) - {holder}, confirm=False)
    writer.write(1, confirm=False)
    op = recovery_op(ctx, writer)
    ctx.bookies[holder].gate.clear()  # the only holder answers last
    task = asyncio.ensure_future(op.run())
    for _ in range(50):
        await asyncio.sleep(0)
    ctx.bookies[holder].gate.set()
    md = (await task).value
    assert md.last_entry_id == 4
    assert md.length == length_through(4)


async def test_unacknowledged_entries_found_on_a_quorum_are_re_added_to_full_write_set() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 3, 2))
    writer.write(8)
    missing_on = list(ctx.bookies)[2]
    writer.write(3, skip={missing_on}, confirm=False)  # entries 8..10 on two of three bookies
    op = recovery_op(ctx, writer)
    md = (await op.run()).value
    assert md.last_entry_id == 10
    assert md.length == length_through(10)
    assert op.recovered_entries == 3  # LAC 7 is piggybacked in entry 8: 8..10 re-added
    stored = ctx.bookies[missing_on].entries[LEDGER]
    assert all(writer.digest.verify_entry(e, stored[e]).payload == payload(e) for e in range(8, 11))
    assert {e for _, e in ctx.bookies[missing_on].recovery_adds} >= {8, 9, 10}


async def test_empty_ledger_closes_at_minus_one() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    md = (await recovery_op(ctx, writer).run()).value
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)


async def test_closed_ledger_is_returned_untouched() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    writer.metadata = writer.metadata.with_closed(2, writer.length)
    result = await recovery_op(ctx, writer).run()
    assert result.value.last_entry_id == 2
    assert ctx.ledger_manager.writes == []
    assert all(b.fence_reads == 0 for b in ctx.bookies.values())


async def test_ledger_left_in_recovery_by_a_dead_recoverer_is_finished() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(4)
    writer.metadata = writer.metadata.with_state(LedgerState.IN_RECOVERY)
    md = (await recovery_op(ctx, writer).run()).value
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 3
    assert states(ctx) == [LedgerState.CLOSED]


async def test_metadata_changed_by_writer_before_in_recovery_is_re_read() -> None:
    ctx = make_cluster(4)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids[:3], 2, 2))
    writer.write(5)
    store = ctx.ledger_manager
    store.ledgers[LEDGER] = Versioned(writer.metadata, 1)
    # The writer swaps bookie 0 out at entry 5 between our read and our CAS.
    changed = writer.metadata.with_ensemble_change(5, (ids[3], ids[1], ids[2]))
    writer.metadata = changed
    writer.write(2)  # entries 5, 6 on the new ensemble
    real_read = store.read_ledger_metadata
    raced = False

    async def read_then_writer_changes_ensemble(ledger_id: int) -> Versioned[LedgerMetadata]:
        nonlocal raced
        current = await real_read(ledger_id)
        if not raced:
            raced = True
            store.ledgers[ledger_id] = Versioned(changed, current.version + 1)
        return current

    store.read_ledger_metadata = read_then_writer_changes_ensemble  # type: ignore[method-assign]
    md = (await LedgerRecoveryOp(ctx, LEDGER, PASSWORD, writer.digest).run()).value
    assert md.last_entry_id == 6
    assert len(md.segments) == 2
    assert ctx.bookies[ids[3]].fence_reads == 1  # fenced the new last ensemble
    assert ctx.bookies[ids[0]].fence_reads == 0


async def test_dead_bookie_in_write_set_is_replaced_during_recovery() -> None:
    ctx = make_cluster(4)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids[:3], 2, 2))
    writer.write(6)
    ctx.bookies[ids[0]].down = True  # E3 Qw2 Qa2: fence answers still cover every window
    op = recovery_op(ctx, writer)
    md = (await op.run()).value
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 5
    assert op.ensemble_changes == 1
    assert md.segments[-1].first_entry_id == 5  # LAC 4 (piggybacked in entry 5) + 1
    assert ids[0] not in md.last_ensemble and ids[3] in md.last_ensemble
    assert (LEDGER, 5) in ctx.bookies[ids[3]].recovery_adds or all(
        (LEDGER, 5) in ctx.bookies[b].recovery_adds for b in write_set_bookies(md, 5)
    )
    for bookie_id in write_set_bookies(md, 5):
        assert 5 in ctx.bookies[bookie_id].entries[LEDGER]


async def test_fencing_that_cannot_cover_the_quorums_fails_and_leaves_it_in_recovery() -> None:
    ctx = make_cluster(3)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 2, 2))
    writer.write(3)
    ctx.bookies[ids[0]].down = True
    ctx.bookies[ids[1]].down = True
    with pytest.raises(Exception) as info:
        await recovery_op(ctx, writer).run()
    assert "cover" in str(info.value)
    assert ctx.ledger_manager.ledgers[LEDGER].value.state == LedgerState.IN_RECOVERY


async def test_undecidable_entry_fails_recovery() -> None:
    ctx = make_cluster(3)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 3, 2))
    writer.write(4)
    for bookie in ctx.bookies.values():
        bookie.corrupt.add((LEDGER, 3))  # entry 3 exists but no copy verifies
    with pytest.raises(LedgerRecoveryError):
        await recovery_op(ctx, writer).run()


async def test_wrong_password_is_refused_by_the_bookies() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    with pytest.raises(UnauthorizedAccessError):
        await recovery_op(ctx, writer, password=b"wrong").run()


async def test_second_recovery_agrees_with_the_first() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(7)
    first = (await recovery_op(ctx, writer).run()).value
    second = (await recovery_op(ctx, writer).run()).value
    assert first == second
