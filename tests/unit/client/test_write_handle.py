"""WriteHandle rules against in-memory bookies and metadata (see tests/support/write_world.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from tests.support.write_world import WriteWorld, gate_metadata_writes, make_world, new_ledger

from bkclient.write_adv_handle import WriteAdvHandle
from bkclient.write_handle import WriteHandle
from bkmeta.model import LedgerState
from bkproto.entry_format import parse_header
from bkproto.errors import (
    BadRequestError,
    BookieUnavailableError,
    DuplicateEntryIdError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    UnauthorizedAccessError,
)


def handle(world: WriteWorld, **kw: object) -> WriteHandle:
    return WriteHandle(world.ctx, *new_ledger(world, **kw))  # type: ignore[arg-type]


async def test_entries_go_to_their_write_sets_and_complete_in_order() -> None:
    world = make_world()
    wh = handle(world)
    ids = [await wh.append(b"e%d" % i) for i in range(6)]
    assert ids == list(range(6))
    assert wh.last_add_confirmed == 5
    assert wh.length == sum(len(b"e%d" % i) for i in range(6))
    # (e + i) % 3 for i in 0..1
    assert world.bookie("b0").entry_ids() == [0, 2, 3, 5]
    assert world.bookie("b1").entry_ids() == [0, 1, 3, 4]
    assert world.bookie("b2").entry_ids() == [1, 2, 4, 5]
    body = world.bookie("b1").adds[-1].body
    payload, lac, length = wh.digest.verify_entry(4, body)
    assert payload == b"e4"
    assert lac == 3  # LAC piggyback: entry 4 was sent after entry 3 completed
    assert length == wh.length - len(b"e5")
    await wh.close()


async def test_completion_waits_for_earlier_entries() -> None:
    world = make_world()
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "hold"
    wh = handle(world)
    f0, f1 = wh.append_async(b"zero"), wh.append_async(b"one")
    await asyncio.sleep(0)  # the second add leaves with the end of the loop turn
    completed: list[int] = []
    f0.add_done_callback(lambda f: completed.append(f.result()))
    f1.add_done_callback(lambda f: completed.append(f.result()))
    world.bookie("b1").ack(1)
    world.bookie("b2").ack(1)  # entry 1 reached Qa first
    await asyncio.sleep(0)
    assert not f1.done()
    assert wh.last_add_confirmed == -1
    world.bookie("b0").ack(0)
    world.bookie("b1").ack(0)
    assert await f1 == 1
    await asyncio.sleep(0)  # let the done-callbacks run
    assert completed == [0, 1]
    assert wh.last_add_confirmed == 1


async def test_failed_bookie_is_replaced_from_lac_plus_one_and_adds_resent() -> None:
    world = make_world(bookies=4)
    wh = handle(world)
    assert await wh.append(b"first") == 0
    b1 = world.bookie("b1")
    b1.mode = "hold"
    futures = [wh.append_async(b"x%d" % i) for i in range(1, 5)]
    await asyncio.sleep(0)
    b1.fail(BookieUnavailableError("b1 died"))
    assert [await f for f in futures] == [1, 2, 3, 4]
    md = world.lm.ledgers[wh.ledger_id].value
    assert [s.first_entry_id for s in md.segments] == [0, 1]
    assert md.segments[1].bookies == ("b0", "b3", "b2")
    assert wh.ensemble == ["b0", "b3", "b2"]
    # Every entry held by b1 went to b3 instead, byte for byte.
    b3 = world.bookie("b3")
    assert sorted(set(b3.entry_ids())) == [1, 3, 4]
    for add in b3.adds:
        assert parse_header(add.body).entry_id == add.entry_id
    assert wh.ensemble_changes == 1
    b1.ack()  # a late answer from the replaced bookie changes nothing
    assert await wh.append(b"after") == 5
    await wh.close()
    assert world.lm.ledgers[wh.ledger_id].value.last_entry_id == 5


async def test_no_entry_completes_while_the_ensemble_changes() -> None:
    world = make_world(bookies=4)
    wh = handle(world)
    gate = gate_metadata_writes(world)
    world.bookie("b2").fail_with(BookieUnavailableError("down"))
    f0 = wh.append_async(b"0")  # b0, b1: fine
    f1 = wh.append_async(b"1")  # b1, b2: b2 fails -> ensemble change waits on the gate
    await asyncio.sleep(0.01)
    assert f0.done()
    f2 = wh.append_async(b"2")  # b2, b0
    await asyncio.sleep(0.01)
    assert not f1.done() and not f2.done()
    assert wh.last_add_confirmed == 0
    gate.set()
    assert await f1 == 1 and await f2 == 2
    assert world.lm.ledgers[wh.ledger_id].value.segments[1].first_entry_id == 1


@pytest.mark.parametrize("finish", ["close", "force"])
async def test_close_or_force_during_an_ensemble_change_waits_for_it(finish: str) -> None:
    # E3 Qw3 Qa2: with b2 down every add still reaches its ack quorum, but none may be released
    # until the new ensemble is in the metadata. Closing then must not fail acknowledged adds.
    world = make_world(bookies=4)
    wh = handle(world, qw=3)
    gate = gate_metadata_writes(world)
    world.bookie("b2").fail_with(BookieUnavailableError("down"))
    assert await wh.append(b"0") == 0  # b0 and b1 answered before b2's error: it does not count
    for b in ("b0", "b1"):
        world.bookie(b).mode = "hold"
    futures = [wh.append_async(b"%d" % i) for i in range(1, 3)]
    await asyncio.sleep(0.01)  # b2 refused them: the ensemble change waits on the gate
    for b in ("b0", "b1"):
        world.bookie(b).ack()  # both reach their ack quorum during the change
    finishing = asyncio.ensure_future(wh.close() if finish == "close" else wh.force())
    await asyncio.sleep(0.01)
    assert not finishing.done()  # waits for the ensemble change
    assert not any(f.done() for f in futures)
    gate.set()
    await finishing
    assert [await f for f in futures] == [1, 2]
    assert wh.last_add_confirmed == 2
    md = world.lm.ledgers[wh.ledger_id].value
    assert md.segments[1].first_entry_id == 1  # entry 0 completed before b2 answered
    if finish == "close":
        assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 2)


async def test_slow_bookie_is_replaced_after_the_add_timeout() -> None:
    world = make_world(bookies=4, add_entry_timeout_s=0.2)
    world.bookie("b0").mode = "hold"  # never answers
    wh = handle(world)
    assert await asyncio.wait_for(wh.append(b"a"), 10) == 0
    assert "b0" not in wh.ensemble


async def test_metadata_conflict_during_ensemble_change_is_retried() -> None:
    world = make_world(bookies=4)
    wh = handle(world)
    await wh.append(b"a")
    md = world.lm.ledgers[wh.ledger_id].value
    world.lm.force(wh.ledger_id, dataclasses.replace(md, custom_metadata={"k": b"v"}))
    world.bookie("b1").fail_with(BookieUnavailableError("down"))
    assert await wh.append(b"b") == 1
    latest = world.lm.ledgers[wh.ledger_id].value
    assert latest.custom_metadata == {"k": b"v"}  # the other change survived
    assert len(latest.segments) == 2


@pytest.mark.parametrize(
    ("state", "error"),
    [(LedgerState.IN_RECOVERY, LedgerFencedError), (LedgerState.CLOSED, LedgerClosedError)],
)
async def test_ensemble_change_aborts_when_metadata_left_open(state: LedgerState, error: type) -> None:
    world = make_world(bookies=4)
    wh = handle(world)
    await wh.append(b"a")
    md = world.lm.ledgers[wh.ledger_id].value
    world.lm.force(wh.ledger_id, md.with_state(state))
    world.bookie("b2").fail_with(BookieUnavailableError("down"))
    futures = [wh.append_async(b"b"), wh.append_async(b"c")]
    for f in futures:
        with pytest.raises(error):
            await f
    with pytest.raises(error):
        wh.append_async(b"d")


@pytest.mark.parametrize("fatal", [LedgerFencedError, UnauthorizedAccessError])
async def test_fencing_and_wrong_password_fail_every_pending_add(fatal: type) -> None:
    world = make_world()
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "hold"
    wh = handle(world)
    futures = [wh.append_async(b"%d" % i) for i in range(4)]
    world.bookie("b0").fail(fatal("no"))
    for f in futures:
        with pytest.raises(fatal):
            await f
    with pytest.raises(fatal):
        await wh.append(b"more")
    assert world.lm.writes == 0  # no ensemble change attempted


async def test_an_entry_over_the_size_limit_is_refused_before_anything_is_sent() -> None:
    world = make_world(max_entry_size_bytes=2048)
    wh = handle(world)
    limit = 2048 - 32 - 4  # header and CRC32C digest
    with pytest.raises(IncorrectParameterError, match=f"2100 bytes is over the {limit}-byte limit"):
        wh.append_async(b"x" * 2100)
    with pytest.raises(IncorrectParameterError):
        await wh.append(b"x" * (limit + 1))
    assert world.bookie("b0").adds == [] and world.bookie("b1").adds == []
    assert await wh.append(b"x" * limit) == 0  # the handle is unharmed; ids are not used up
    assert world.lm.writes == 0


async def test_a_bad_request_fails_the_handle_instead_of_changing_the_ensemble() -> None:
    # Any replacement bookie would refuse the same request (e.g. an entry over its
    # nettyMaxFrameSizeBytes): changing the ensemble would only loop.
    world = make_world(bookies=6)
    wh = handle(world)
    world.bookie("b0").fail_with(BadRequestError("entry too large"))
    with pytest.raises(BadRequestError):
        await wh.append(b"a")
    with pytest.raises(BadRequestError):
        wh.append_async(b"b")
    assert world.lm.writes == 0


async def test_not_enough_bookies_for_replacement_fails_adds() -> None:
    world = make_world(bookies=3)
    wh = handle(world)
    world.bookie("b1").fail_with(BookieUnavailableError("down"))
    with pytest.raises(NotEnoughBookiesError):
        await wh.append(b"a")


async def test_outstanding_adds_are_bounded() -> None:
    world = make_world(max_outstanding_adds=2, max_waiting_adds=3)
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "hold"
    wh = handle(world)
    futures = [wh.append_async(b"%d" % i) for i in range(5)]
    await asyncio.sleep(0)
    sent = {a.entry_id for b in ("b0", "b1", "b2") for a in world.bookie(b).adds}
    assert sent == {0, 1}  # the other three wait unsent
    with pytest.raises(TooManyRequestsError):
        wh.append_async(b"too many")
    waiter = asyncio.ensure_future(wh.append(b"5"))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "ack"
        world.bookie(b).ack()
    assert [await f for f in futures] == [0, 1, 2, 3, 4]
    assert await waiter == 5


async def test_bytes_outstanding_are_bounded() -> None:
    world = make_world(max_outstanding_bytes=100)
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "hold"
    wh = handle(world)
    wh.append_async(b"x" * 60)
    wh.append_async(b"y" * 60)
    await asyncio.sleep(0)
    assert {a.entry_id for a in world.bookie("b1").adds} == {0}


async def test_close_records_last_entry_and_length() -> None:
    world = make_world()
    wh = handle(world)
    for _ in range(3):
        await wh.append(b"abc")
    await wh.close()
    md = world.lm.ledgers[wh.ledger_id].value
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 2, 9)
    assert wh.is_closed
    with pytest.raises(LedgerClosedError):
        await wh.append(b"late")
    await wh.close()  # idempotent


async def test_close_of_empty_ledger() -> None:
    world = make_world()
    wh = handle(world)
    await wh.close()
    md = world.lm.ledgers[wh.ledger_id].value
    assert (md.last_entry_id, md.length) == (-1, 0)


async def test_close_conflict_rules() -> None:
    world = make_world()
    same = handle(world, ledger_id=1)
    await same.append(b"ab")
    md = world.lm.ledgers[1].value
    world.lm.force(1, md.with_closed(0, 2))
    await same.close()  # closed elsewhere at the same point: success

    other = handle(world, ledger_id=2)
    await other.append(b"ab")
    world.lm.force(2, world.lm.ledgers[2].value.with_closed(5, 99))
    with pytest.raises(MetadataVersionError):
        await other.close()

    recovering = handle(world, ledger_id=3)
    await recovering.append(b"ab")
    world.lm.force(3, world.lm.ledgers[3].value.with_state(LedgerState.IN_RECOVERY))
    with pytest.raises(LedgerFencedError):
        await recovering.close()


async def test_explicit_lac_is_sent_when_the_writer_goes_idle() -> None:
    world = make_world(explicit_lac_interval_s=0.05)
    wh = handle(world)
    for _ in range(3):
        await wh.append(b"x")
    for _ in range(100):
        if world.bookie("b0").lacs:
            break
        await asyncio.sleep(0.02)
    lac, body = world.bookie("b0").lacs[0]
    assert lac == 2
    assert wh.digest.verify_lac(body) == 2
    await wh.close()


async def test_force_syncs_the_current_ensemble() -> None:
    world = make_world()
    wh = handle(world)
    await wh.append(b"x")
    assert await wh.force() == 0
    assert all(world.bookie(b).forced == [wh.ledger_id] for b in ("b0", "b1", "b2"))


async def test_adv_handle_completes_in_id_order_whatever_the_write_order() -> None:
    world = make_world()
    wh = WriteAdvHandle(world.ctx, *new_ledger(world))  # type: ignore[arg-type]
    f2 = wh.write_async(2, b"two")
    f0 = wh.write_async(0, b"zero")
    await asyncio.sleep(0.01)
    assert f0.done() and not f2.done()
    with pytest.raises(DuplicateEntryIdError):
        wh.write_async(2, b"again")
    with pytest.raises(DuplicateEntryIdError):
        wh.write_async(0, b"again")
    assert await wh.write(1, b"one") == 1
    assert await f2 == 2
    assert wh.last_add_confirmed == 2
    with pytest.raises(DuplicateEntryIdError):
        wh.append_async(b"no ids")
    await wh.close()
    md = world.lm.ledgers[wh.ledger_id].value
    assert (md.last_entry_id, md.length) == (2, len(b"zero" + b"one" + b"two"))


async def test_a_recently_failed_bookie_is_not_picked_again_while_others_exist() -> None:
    world = make_world(bookies=5)
    wh = handle(world)
    for victim in ("b1", "b0"):
        world.bookie(victim).fail_with(BookieUnavailableError(f"{victim} down"))
    await wh.append(b"a")
    await wh.append(b"b")
    # Both failed bookies are still "registered"; neither may come back as a replacement.
    assert not {"b0", "b1"} & set(wh.ensemble)
    assert sorted(wh.ensemble) == ["b2", "b3", "b4"]


async def test_append_with_callback_reports_in_entry_id_order() -> None:
    world = make_world()
    for b in ("b0", "b1", "b2"):
        world.bookie(b).mode = "hold"
    wh = handle(world)
    seen: list[tuple[int, object]] = []
    ids = [wh.append_with_callback(b"%d" % i, lambda e, err: seen.append((e, err))) for i in range(3)]
    assert ids == [0, 1, 2]
    await asyncio.sleep(0)  # adds after the first leave with the end of the loop turn
    for entry_id in (2, 1, 0):  # acks arrive backwards
        for b in ("b0", "b1", "b2"):
            world.bookie(b).ack(entry_id)
    assert seen == [(0, None), (1, None), (2, None)]
    world.bookie("b0").fail(LedgerFencedError("fenced"))  # nothing pending: no callback
    failing: list[tuple[int, object]] = []
    wh.append_with_callback(b"x", lambda e, err: failing.append((e, err)))
    world.bookie("b1").fail(LedgerFencedError("fenced"))
    assert len(failing) == 1
    assert failing[0][0] == 3 and isinstance(failing[0][1], LedgerFencedError)


async def test_adv_close_with_a_gap_fails_the_unreachable_entries() -> None:
    world = make_world()
    wh = WriteAdvHandle(world.ctx, *new_ledger(world))  # type: ignore[arg-type]
    await wh.write(0, b"zero")
    beyond_gap = wh.write_async(2, b"two")  # entry 1 never comes
    await asyncio.wait_for(wh.close(), 10)
    with pytest.raises(LedgerClosedError):
        await beyond_gap
    assert world.lm.ledgers[wh.ledger_id].value.last_entry_id == 0
