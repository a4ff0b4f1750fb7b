"""A recoverer that replaced a bookie and died before closing: the next recovery must still close
the ledger after every acknowledged entry, on bookies that hold them.

The replacement holds only what the dead recoverer gave it, so nothing it did may leave the next
recoverer reading from it as if the writer had written there (apache/bookkeeper keeps recovery's
ensemble changes in memory until the close for that reason).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.memory_cluster import (
    LEDGER,
    PASSWORD,
    FakeContext,
    Writer,
    make_cluster,
    make_metadata,
    payload,
)
from tests.support.memory_recovery import copies_in_write_set, recovery_op

from bkclient.digest import DigestManager
from bkclient.read_handle import ReadHandle
from bkclient.transport import ReadResult
from bkmeta.model import LedgerMetadata, LedgerState, Versioned


def answers_after_another_bookie(ctx: FakeContext, slow: list[str], first_entry: int) -> None:
    """Reads of entries ``first_entry``.. on the ``slow`` bookies answer only once a bookie not in
    ``slow`` has answered such a read: whoever else is asked speaks first."""
    answered = asyncio.Event()
    for bookie_id, bookie in ctx.bookies.items():
        real_read = bookie.read_entry

        async def read_entry(
            ledger_id: int,
            entry_id: int,
            real_read: Callable[..., Awaitable[ReadResult]] = real_read,
            is_slow: bool = bookie_id in slow,
            **kwargs: Any,
        ) -> ReadResult:
            if entry_id < first_entry:
                return await real_read(ledger_id, entry_id, **kwargs)
            if is_slow:
                await answered.wait()
            try:
                return await real_read(ledger_id, entry_id, **kwargs)
            finally:
                if not is_slow:
                    answered.set()

        bookie.read_entry = read_entry  # type: ignore[method-assign]


def on_first_add(ctx: FakeContext, bookie_id: str) -> asyncio.Event:
    """An event set when the bookie is first sent an add."""
    bookie = ctx.bookies[bookie_id]
    real_add = bookie.add
    called = asyncio.Event()

    def add(*args: Any, **kwargs: Any) -> asyncio.Future[None]:
        called.set()
        return real_add(*args, **kwargs)

    bookie.add = add  # type: ignore[method-assign]
    return called


async def read_all(ctx: FakeContext, md: Versioned[LedgerMetadata]) -> list[bytes]:
    digest = DigestManager(LEDGER, PASSWORD, md.value.digest_type)
    handle = ReadHandle(ctx, LEDGER, md, digest)
    return [e.data async for e in handle.read(0, md.value.last_entry_id)]


async def test_a_recoverer_dying_after_a_replacement_loses_no_acknowledged_entry() -> None:
    ctx = make_cluster(4)
    a, b, c, d = ctx.bookies
    writer = Writer(ctx, make_metadata([a, b, c], 2, 2))  # E3 Qw2 Qa2
    writer.write(9)
    # 9..14 reached both bookies of their write sets, so the writer had them acknowledged; it died
    # before any later entry told the bookies (their LAC stays 8).
    writer.write(6, confirm=False)
    ctx.bookies[a].refused_adds[(LEDGER, 9)] = refused = asyncio.Event()
    refused.set()  # the first recoverer's re-add of entry 9 to `a` fails: `a` is replaced by `d`
    ctx.bookies[d].gate.clear()  # and its re-adds to `d` hang, until the recoverer dies
    re_adding_to_d = on_first_add(ctx, d)
    first = recovery_op(ctx, writer)
    task = asyncio.ensure_future(first.run())
    async with asyncio.timeout(10):
        await re_adding_to_d.wait()
    assert first.ensemble_changes == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    ctx.bookies[d].gate.set()
    left = ctx.ledger_manager.ledgers[LEDGER].value
    assert left.state == LedgerState.IN_RECOVERY
    # Its replacement was never written down: the next recoverer sees where the writer wrote.
    assert left.segments == writer.metadata.segments

    # `b` and `c` answer reads of 9.. after any other bookie asked: were `d` (which holds nothing)
    # asked, its "no such entry" would come first and could end the ledger at 8.
    answers_after_another_bookie(ctx, [b, c], 9)
    second = recovery_op(ctx, writer)
    closed = await second.run()
    md = closed.value
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 14)
    assert await read_all(ctx, closed) == [payload(i) for i in range(15)]
    for entry_id in range(9, 15):
        assert copies_in_write_set(ctx, md, entry_id) >= 2, entry_id
