"""Ledger recovery that replaces a bookie while re-adds are in flight: which answers may count.

Whatever the timing, a closed ledger must name, for every entry, a write set of which at least Qa
bookies hold the entry: readers and re-replication go only there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.memory_cluster import LEDGER, FakeContext, Writer, make_cluster, make_metadata
from tests.support.memory_recovery import copies_in_write_set, recovery_op
from tests.support.recovery_hooks import on_replacement_picked

from bkclient.transport import ReadResult
from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkproto.errors import LedgerRecoveryError


def on_ensemble_change(ctx: FakeContext, action: asyncio.Event) -> None:
    """Set ``action`` the moment recovery picks a replacement bookie (its new segment is in use
    from then on; the metadata gets it only when the ledger closes)."""
    on_replacement_picked(ctx.placement, lambda _: action.set())


async def test_ack_from_a_paused_bookie_replaced_meanwhile_does_not_count() -> None:
    ctx = make_cluster(4)
    a, b, c, d = ctx.bookies
    writer = Writer(ctx, make_metadata([a, b, c], 2, 2))  # E3 Qw2 Qa2
    writer.write(9)  # 0..8 acknowledged; the bookies know LAC 8 from entries 9..
    writer.write(6, skip={a}, confirm=False)  # 9..14: the ones whose write set has `a` on one bookie
    paused = ctx.bookies[a]
    paused.gate.clear()  # SIGSTOP: every call waits
    refused = asyncio.Event()
    refused.set()
    paused.refused_adds[(LEDGER, 9)] = refused  # one re-add fails at once: `a` is replaced
    on_ensemble_change(ctx, paused.gate)  # SIGCONT as soon as the new segment is in use
    op = recovery_op(ctx, writer)
    md = (await op.run()).value
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 14)
    assert op.ensemble_changes == 1 and a not in md.last_ensemble and d in md.last_ensemble
    # The resumed bookie did acknowledge re-adds after it was replaced...
    assert {e for _, e in paused.recovery_adds} >= {11, 12, 14}
    # ...but the metadata names its replacement, so the replacement must hold them.
    for entry_id in range(9, 15):
        assert copies_in_write_set(ctx, md, entry_id) >= 2, entry_id


async def test_entry_recovered_before_a_replacement_keeps_its_write_set() -> None:
    ctx = make_cluster(4)
    a, b, c, _ = ctx.bookies
    writer = Writer(ctx, make_metadata([a, b, c], 2, 2))
    writer.write(9)
    writer.write(4, confirm=False)  # 9..12 on their whole write sets, none known acknowledged
    refused = asyncio.Event()
    ctx.bookies[a].refused_adds[(LEDGER, 11)] = refused

    for holder in (a, b):  # once both re-added entry 9, `a` refuses entry 11
        bookie = ctx.bookies[holder]

        def store_then_refuse(
            ledger_id: int, entry_id: int, body: bytes, master_key: bytes, real_store: Any = bookie.store
        ) -> None:
            real_store(ledger_id, entry_id, body, master_key)
            if all((LEDGER, 9) in ctx.bookies[x].recovery_adds for x in (a, b)):
                refused.set()

        bookie.store = store_then_refuse  # type: ignore[method-assign]
    op = recovery_op(ctx, writer)
    md = (await op.run()).value
    assert md.last_entry_id == 12 and op.ensemble_changes == 1
    for entry_id in range(9, 13):
        assert copies_in_write_set(ctx, md, entry_id) >= 2, entry_id
    # Entry 9 was on Qa bookies (a and b) before `a` failed entry 11: the new segment starts after
    # it, rather than re-adding it to the replacement.
    assert md.segments[-1].first_entry_id > 9


async def test_reads_after_a_replacement_ask_the_bookies_the_writer_wrote_to() -> None:
    ctx = make_cluster(4)
    a, b, c, d = ctx.bookies
    writer = Writer(ctx, make_metadata([a, b, c], 2, 2))
    writer.write(9)
    writer.write(40, confirm=False)  # 9..48 on their whole write sets
    refused = asyncio.Event()
    refused.set()
    ctx.bookies[a].refused_adds[(LEDGER, 11)] = refused  # `a` is replaced early in the recovery
    replaced = asyncio.Event()
    on_ensemble_change(ctx, replaced)

    def delayed_reads(bookie_id: str, delay: asyncio.Event | float) -> None:
        """Reads of entries 20.. answer only after ``delay`` (an event, or seconds)."""
        bookie = ctx.bookies[bookie_id]
        real_read = bookie.read_entry

        async def read_entry(ledger_id: int, entry_id: int, **kwargs: object) -> ReadResult:
            if entry_id >= 20:
                if isinstance(delay, asyncio.Event):
                    await delay.wait()
                else:
                    await asyncio.sleep(delay)
            return await real_read(ledger_id, entry_id, **kwargs)  # type: ignore[arg-type]

        bookie.read_entry = read_entry  # type: ignore[method-assign]

    delayed_reads(a, replaced)
    delayed_reads(c, replaced)
    delayed_reads(b, 0.2)  # so that a replacement's "no such ledger" would come first
    op = recovery_op(ctx, writer)
    md = (await op.run()).value
    assert op.ensemble_changes == 1 and d in md.last_ensemble
    assert md.last_entry_id == 48  # `d` saying "no such entry" proves nothing about 20..48
    for entry_id in range(9, 49):
        assert copies_in_write_set(ctx, md, entry_id) >= 2, entry_id


async def test_close_refuses_metadata_whose_ensembles_another_recoverer_changed() -> None:
    ctx = make_cluster(4)
    a, b, c, d = ctx.bookies
    writer = Writer(ctx, make_metadata([a, b, c], 2, 2))
    writer.write(9)
    writer.write(3, skip={a}, confirm=False)  # 9..11: re-added to `a` by this recovery
    store = ctx.ledger_manager
    real_write = store.write_ledger_metadata

    async def other_recoverer_replaces_a_first(
        ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        if md.state == LedgerState.CLOSED:  # just before our close, another recoverer swaps `a` out
            current = store.ledgers[ledger_id]
            store.ledgers[ledger_id] = Versioned(current.value.with_ensemble_change(9, (d, b, c)),
                                                 current.version + 1)
            store.write_ledger_metadata = real_write  # type: ignore[method-assign]
        return await real_write(ledger_id, md, expected_version)

    store.write_ledger_metadata = other_recoverer_replaces_a_first  # type: ignore[method-assign]
    with pytest.raises(LedgerRecoveryError, match="changed its ensembles"):
        await recovery_op(ctx, writer).run()
    # Not closed on the other's segments: entries 9 and 11 are on `a`, which they no longer name.
    assert store.ledgers[LEDGER].value.state == LedgerState.IN_RECOVERY
