"""A write handle sends the adds of one loop turn per bookie in one call: the bookies must get the
bytes, in the order, that sending each add alone would have given them (see
tests/support/write_world.py)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.write_world import WriteWorld, make_world, new_ledger

from bkclient.write_adv_handle import WriteAdvHandle
from bkclient.write_handle import WriteHandle
from bkproto.errors import (
    DuplicateEntryIdError,
    IncorrectParameterError,
    LedgerFencedError,
    TooManyRequestsError,
)

# (E, Qw) of the ensembles tried: striped, full, and one bookie.
_QUORUMS = [(3, 2), (3, 3), (4, 2), (5, 3), (5, 4), (2, 1), (1, 1)]


async def _sent_per_bookie(
    quorums: tuple[int, int], sizes: list[int], order: list[int] | None, how: str
) -> dict[str, list[bytes]]:
    """Every bookie's queued bytes after appending entries of ``sizes`` (to a ledger-adv handle
    in the id order ``order`` if given) one per loop turn (``how`` "one by one"), all in one turn
    ("one turn") or in one ``append_batch_async`` ("api"). The bookies hold every add, so the LAC
    each entry carries is the same (-1) every way."""
    batched = how != "one by one"
    ensemble_size, write_quorum = quorums
    world = make_world(bookies=ensemble_size)
    ensemble = tuple(f"b{i}" for i in range(ensemble_size))
    for bookie_id in ensemble:
        world.bookie(bookie_id).mode = "hold"
    ledger = new_ledger(world, ensemble=ensemble, qw=write_quorum, qa=1)
    futures: list[asyncio.Future[int]] = []
    if order is None:
        handle = WriteHandle(world.ctx, *ledger)  # type: ignore[arg-type]
        payloads = [bytes([index % 256]) * size for index, size in enumerate(sizes)]
        if how == "api":
            futures.append(handle.append_batch_async(payloads))
        for payload in payloads if how != "api" else []:
            futures.append(handle.append_async(payload))
            if not batched:
                await asyncio.sleep(0)
    else:
        adv = WriteAdvHandle(world.ctx, *ledger)  # type: ignore[arg-type]
        handle = adv
        for entry_id in order:
            futures.append(adv.write_async(entry_id, bytes([entry_id % 256]) * sizes[entry_id]))
            if not batched:
                await asyncio.sleep(0)
    await asyncio.sleep(0)
    sent = {bookie_id: [add.encoded for add in world.bookie(bookie_id).adds] for bookie_id in ensemble}
    await handle.abort()
    await asyncio.gather(*futures, return_exceptions=True)
    return sent


@settings(max_examples=60, deadline=None)
@given(quorums=st.sampled_from(_QUORUMS), sizes=st.lists(st.integers(0, 300), min_size=1, max_size=30))
def test_a_batch_sends_each_bookie_the_bytes_of_adds_sent_one_by_one(
    quorums: tuple[int, int], sizes: list[int]
) -> None:
    one_by_one = asyncio.run(_sent_per_bookie(quorums, sizes, None, "one by one"))
    assert asyncio.run(_sent_per_bookie(quorums, sizes, None, "one turn")) == one_by_one
    assert asyncio.run(_sent_per_bookie(quorums, sizes, None, "api")) == one_by_one
    write_quorum = quorums[1]
    assert sum(map(len, one_by_one.values())) == len(sizes) * write_quorum


@settings(max_examples=40, deadline=None)
@given(quorums=st.sampled_from(_QUORUMS), order=st.permutations(list(range(12))))
def test_a_ledger_adv_batch_in_any_id_order_sends_the_same_bytes(
    quorums: tuple[int, int], order: list[int]
) -> None:
    sizes = [10 + i for i in range(12)]
    one_by_one = asyncio.run(_sent_per_bookie(quorums, sizes, order, "one by one"))
    assert asyncio.run(_sent_per_bookie(quorums, sizes, order, "one turn")) == one_by_one


def _handle(world: WriteWorld) -> WriteHandle:
    return WriteHandle(world.ctx, *new_ledger(world))  # type: ignore[arg-type]


async def test_append_batch_appends_consecutive_entries_completing_in_order_with_single_appends() -> None:
    world = make_world()
    wh = _handle(world)
    assert await wh.append(b"first") == 0
    single = wh.append_async(b"one")
    batch = wh.append_batch_async([b"two", bytearray(b"three"), memoryview(b"four")])
    after = wh.append_async(b"five")
    assert [await single, await batch, await after] == [1, 4, 5]
    assert await wh.append_batch((b"six",)) == 6
    assert wh.length == len(b"firstonetwothreefourfivesix")
    for entry_id, payload in enumerate([b"first", b"one", b"two", b"three", b"four", b"five", b"six"]):
        body = world.bookie("b1" if entry_id % 3 in (0, 1) else "b2").entries[7][entry_id]
        assert wh.digest.verify_entry(entry_id, body).payload == payload
    await wh.close()


@pytest.mark.parametrize(
    ("payloads", "error"),
    [
        ([], IncorrectParameterError),
        (b"not a batch", IncorrectParameterError),
        (iter([b"a generator"]), IncorrectParameterError),
        ([b"fine", "text"], IncorrectParameterError),
        ([b"fine", None], IncorrectParameterError),
        ([b"fine", b"x" * 2100], IncorrectParameterError),
        ([b"x"] * 12, TooManyRequestsError),
    ],
)
async def test_a_bad_batch_appends_nothing(payloads: object, error: type[Exception]) -> None:
    world = make_world(max_entry_size_bytes=2048, max_outstanding_adds=2, max_waiting_adds=9)
    wh = _handle(world)
    assert await wh.append(b"before") == 0
    with pytest.raises(error):
        wh.append_batch_async(payloads)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert wh.last_add_pushed == 0
    assert [b.entry_ids() for b in (world.bookie("b0"), world.bookie("b1"))] == [[0], [0]]
    assert await wh.append_batch([b"x"] * 11) == 11  # 2 sent at once, 9 waiting: the limit
    await wh.close()


async def test_a_batch_fails_with_the_handle_and_its_completed_entries_are_confirmed() -> None:
    world = make_world()
    b2 = world.bookie("b2")
    b2.mode = "hold"
    wh = _handle(world)
    batch = wh.append_batch_async([b"%d" % i for i in range(5)])  # 0: b0 b1, 1: b1 b2, ...
    await asyncio.sleep(0.01)
    assert wh.last_add_confirmed == 0
    b2.fail(LedgerFencedError("fenced"))
    with pytest.raises(LedgerFencedError):
        await batch
    assert wh.last_add_confirmed == 0
    with pytest.raises(LedgerFencedError):
        wh.append_batch_async([b"later"])


async def test_a_ledger_adv_handle_refuses_batches_without_ids() -> None:
    world = make_world()
    adv = WriteAdvHandle(world.ctx, *new_ledger(world))  # type: ignore[arg-type]
    with pytest.raises(DuplicateEntryIdError):
        adv.append_batch_async([b"x"])
    with pytest.raises(DuplicateEntryIdError):
        await adv.append_batch([b"x"])


async def test_an_application_told_of_an_add_sees_the_lac_and_length_including_it() -> None:
    world = make_world(max_outstanding_adds=3)
    wh = _handle(world)
    seen: list[tuple[int, int, int]] = []

    def told(entry_id: int, error: object) -> None:
        assert error is None
        seen.append((entry_id, wh.last_add_confirmed, wh.length))

    wh.append_with_callback(b"a", told)
    batch = wh.append_batch_async([b"bb", b"ccc"])
    wh.append_with_callback(b"dddd", told)
    assert await batch == 2
    assert await wh.append_batch([b"eeeee"]) == 4
    # A future's callbacks run later, when the LAC may have moved on; a callback runs at once.
    assert seen == [(0, 0, 1), (3, 3, 10)]
    assert (wh.last_add_confirmed, wh.length) == (4, 15)
    for bookie_id in ("b0", "b1", "b2"):
        world.bookie(bookie_id).mode = "hold"
    wh.append_batch_async([b"x"] * 3)  # the limit: room for all three only if all was released
    await asyncio.sleep(0)
    assert {add.entry_id for b in ("b0", "b1", "b2") for add in world.bookie(b).held} == {5, 6, 7}
