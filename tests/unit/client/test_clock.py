"""The client reads time through its context's clock (``bkmeta.clock``), so a simulation that
controls the clock controls what the client stamps and measures."""

from __future__ import annotations

import asyncio

from tests.support.clock import ManualClock
from tests.support.write_world import make_world

from bkclient import BookKeeper
from bkmeta.clock import LoopClock


async def test_a_new_ledgers_ctime_comes_from_the_clock() -> None:
    world = make_world()
    clock = ManualClock(wall_ms=1_234_567_000)
    world.ctx.clock = clock
    bk = BookKeeper(world.ctx, owns_metadata=False)
    clock.advance(2.5)
    wh = await bk.create_ledger(3, 2, 2)
    assert (await bk.ledger_metadata(wh.ledger_id)).ctime == 1_234_569_500
    await wh.close()


async def test_the_default_clock_is_the_running_loops() -> None:
    loop = asyncio.get_running_loop()
    before = loop.time()
    reading = LoopClock().monotonic()
    assert before <= reading <= loop.time()
    assert make_world().ctx.clock.monotonic() <= loop.time()
