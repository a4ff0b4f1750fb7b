"""A writer's bookie replaced while its answers are still on the way: they must not count for an
entry the new metadata places on another bookie (see tests/support/write_world.py)."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.write_world import (
    WriteWorld,
    after_metadata_writes,
    gate_metadata_writes,
    make_world,
    new_ledger,
)

from bkclient.write_handle import WriteHandle
from bkproto.errors import BookieUnavailableError


def handle(world: WriteWorld) -> WriteHandle:
    return WriteHandle(world.ctx, *new_ledger(world))  # type: ignore[arg-type]


@pytest.mark.parametrize("late", ["while its replacement is written", "once it was replaced"])
async def test_ack_from_a_bookie_being_replaced_does_not_count(late: str) -> None:
    world = make_world(bookies=4)
    wh = handle(world)  # E3 Qw2 Qa2 on b0 b1 b2
    assert await wh.append(b"0") == 0
    gate = gate_metadata_writes(world)
    b1, b3 = world.bookie("b1"), world.bookie("b3")
    b1.mode = b3.mode = "hold"
    f1 = wh.append_async(b"1")  # b1 b2
    f2 = wh.append_async(b"2")  # b2 b0
    f3 = wh.append_async(b"3")  # b0 b1
    await asyncio.sleep(0)
    b1.fail(BookieUnavailableError("b1 failed entry 3"), entry_id=3)  # b1 is being replaced...
    await asyncio.sleep(0.01)
    if late == "while its replacement is written":
        b1.ack(1)  # ...and answers entry 1 meanwhile
    gate.set()
    await asyncio.sleep(0.01)
    assert wh.ensemble == ["b0", "b3", "b2"]
    if late == "once it was replaced":
        b1.ack(1)
        await asyncio.sleep(0)
    # Entry 1 had b1's and b2's acks, but the metadata now names b3 for it: not complete yet.
    assert world.lm.ledgers[wh.ledger_id].value.segments[-1].first_entry_id == 1
    assert not f1.done() and not f2.done()
    assert sorted(b3.entry_ids()) == [1, 3]
    b3.ack()
    assert [await f for f in (f1, f2, f3)] == [1, 2, 3]
    await wh.close()


async def test_a_bookie_failing_in_the_middle_of_a_batch_is_replaced_for_the_whole_batch() -> None:
    world = make_world(bookies=4)
    wh = handle(world)  # E3 Qw2 Qa2 on b0 b1 b2
    b1 = world.bookie("b1")
    b1.mode = "hold"
    futures = [wh.append_async(b"%d" % i) for i in range(12)]  # one loop turn: one batch per bookie
    await asyncio.sleep(0)
    assert b1.entry_ids() == [0, 1, 3, 4, 6, 7, 9, 10]
    b1.ack(0)
    b1.fail(BookieUnavailableError("b1 failed entry 4"), entry_id=4)
    assert [await f for f in futures] == list(range(12))
    assert wh.ensemble == ["b0", "b3", "b2"]
    md = world.lm.ledgers[wh.ledger_id].value
    first_new = md.segments[-1].first_entry_id
    assert first_new <= 1  # entry 0 may have been released before the failure reached the handle
    # Every entry of slot 1 from the new segment on went to b3, once, byte for byte as to b1.
    b3 = world.bookie("b3")
    slot_1 = [e for e in range(first_new, 12) if e % 3 in (0, 1)]
    assert b3.entry_ids() == slot_1
    sent_to_b1 = {a.entry_id: a.encoded for a in b1.adds}
    assert all(a.encoded == sent_to_b1[a.entry_id] for a in b3.adds)
    b1.ack()  # late answers of the replaced bookie change nothing
    assert await wh.append(b"after") == 12
    await wh.close()


async def test_adds_appended_as_the_new_ensemble_is_adopted_go_only_to_the_new_bookie() -> None:
    # Adds appended in the loop step that adopts a new ensemble leave at the end of that turn: they
    # must go to the bookies of the ensemble that holds when they leave, not the replaced one.
    world = make_world(bookies=4)
    wh = handle(world)
    b1 = world.bookie("b1")
    b1.mode = "hold"
    first = [wh.append_async(b"%d" % i) for i in range(3)]  # 0: b0 b1, 1: b1 b2, 2: b2 b0
    await asyncio.sleep(0)
    later: list[asyncio.Future[int]] = []
    after_metadata_writes(world, lambda: later.extend(wh.append_async(b"%d" % i) for i in range(3, 9)))
    b1.fail(BookieUnavailableError("b1 died"))
    assert [await f for f in first] == [0, 1, 2]
    assert [await f for f in later] == list(range(3, 9))
    assert wh.ensemble == ["b0", "b3", "b2"]
    assert b1.entry_ids() == [0, 1]
    assert world.bookie("b3").entry_ids() == [0, 1, 3, 4, 6, 7]  # the two re-sent, then the batch
    await wh.close()
    assert world.lm.ledgers[wh.ledger_id].value.last_entry_id == 8


async def test_force_returns_the_lac_it_synced_not_a_later_one() -> None:
    world = make_world()
    wh = handle(world)
    await wh.append(b"x")
    syncing = asyncio.Event()
    released = asyncio.Event()
    b0 = world.bookie("b0")

    async def slow_force(ledger_id: int, **_: object) -> None:
        syncing.set()
        await released.wait()
        b0.forced.append(ledger_id)

    b0.force_ledger = slow_force  # type: ignore[method-assign]
    forcing = asyncio.ensure_future(wh.force())
    await syncing.wait()
    assert await wh.append(b"y") == 1  # completes while the syncs are out
    released.set()
    assert await forcing == 0
