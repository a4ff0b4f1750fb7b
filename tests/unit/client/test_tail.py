"""Tailing reader against memory bookies: every committed entry in order, no busy polling, and an
end exactly at the close."""

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

from bkclient.digest import DigestManager
from bkclient.entry import LedgerEntry
from bkclient.ops.tail import StridePolls
from bkclient.read_handle import ReadHandle
from bkmeta.model import Versioned
from bkproto.errors import NoSuchLedgerError


def open_handle(ctx: FakeContext, writer: Writer) -> ReadHandle:
    versioned = Versioned(writer.metadata, 1)
    ctx.ledger_manager.ledgers[LEDGER] = versioned
    return ReadHandle(ctx, LEDGER, versioned, DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type))


async def close_ledger(ctx: FakeContext, writer: Writer) -> Versioned:  # type: ignore[type-arg]
    current = ctx.ledger_manager.ledgers[LEDGER]
    return await ctx.ledger_manager.write_ledger_metadata(
        LEDGER, current.value.with_closed(writer.lac, writer.length), current.version
    )


async def test_tail_follows_writer_and_stops_at_close_noticed_through_metadata_watch() -> None:
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    rh = open_handle(ctx, writer)
    received: list[LedgerEntry] = []

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry)

    consumer = asyncio.ensure_future(consume())
    for batch in (1, 3, 1, 20, 2):
        writer.write(batch)
        await writer.notify()
        for _ in range(30):
            await asyncio.sleep(0)
    await close_ledger(ctx, writer)  # the long poll would park 30 s: only the watch ends it now
    await asyncio.wait_for(consumer, 5)
    assert ctx.ledger_manager.watchers[LEDGER] == []
    assert [e.entry_id for e in received] == list(range(27))
    assert [e.data for e in received] == [payload(i) for i in range(27)]
    # Long polls park on the bookies: a handful of reads per batch, not a spin.
    total_reads = sum(len(b.reads) + len(b.batch_reads) for b in ctx.bookies.values())
    assert total_reads < 100
    # The standing polls end with the tail: none stays parked on a bookie.
    await asyncio.sleep(0)
    assert [p for b in ctx.bookies.values() for p in b.standing if p.parked] == []


async def test_tail_notices_close_without_a_watch_notification_when_the_poll_times_out() -> None:
    ctx = make_cluster(3, long_poll_timeout_s=0.02)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 3, 2))
    writer.write(5)
    rh = open_handle(ctx, writer)
    ctx.ledger_manager.watch_ledger = lambda ledger_id, callback: None  # type: ignore[method-assign]
    ctx.ledger_manager.unwatch_ledger = lambda ledger_id, callback: None  # type: ignore[method-assign]
    received = []
    got_four = asyncio.Event()

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry.entry_id)
            if len(received) == 4:
                got_four.set()

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(got_four.wait(), 5)
    await asyncio.sleep(0.05)  # several poll timeouts: entry 4 must still not show up
    # Entry 4 carries LAC 3; the last entry only becomes readable once the metadata says closed.
    assert received == [0, 1, 2, 3]
    await close_ledger(ctx, writer)
    await asyncio.wait_for(consumer, 5)
    assert received == [0, 1, 2, 3, 4]


async def test_tail_of_closed_ledger_from_the_middle() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(30)
    writer.metadata = writer.metadata.with_closed(writer.lac, writer.length)
    rh = open_handle(ctx, writer)
    assert [e.entry_id async for e in rh.tail(12)] == list(range(12, 30))
    assert [e.entry_id async for e in rh.tail(30)] == []


async def test_tail_survives_an_ensemble_change_it_learns_from_metadata() -> None:
    ctx = make_cluster(4, long_poll_timeout_s=0.02)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids[:3], 3, 2))
    writer.write(10)
    rh = open_handle(ctx, writer)
    received: list[int] = []

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry.entry_id)

    consumer = asyncio.ensure_future(consume())
    await asyncio.sleep(0.03)
    # Bookie 0 dies; the writer moves on with bookie 3 from entry 10 (LAC 9 after entry 10 acks).
    ctx.bookies[ids[0]].down = True
    current = ctx.ledger_manager.ledgers[LEDGER]
    changed = current.value.with_ensemble_change(10, (ids[3], ids[1], ids[2]))
    await ctx.ledger_manager.write_ledger_metadata(LEDGER, changed, current.version)
    writer.metadata = changed
    writer.write(10)
    await writer.notify()
    await asyncio.sleep(0.05)
    await close_ledger(ctx, writer)
    await asyncio.wait_for(consumer, 5)
    assert received == list(range(20))


async def test_tail_of_deleted_ledger_raises() -> None:
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    rh = open_handle(ctx, writer)
    received: list[int] = []
    got_two = asyncio.Event()

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry.entry_id)
            if len(received) == 2:
                got_two.set()

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(got_two.wait(), 5)
    for callback in list(ctx.ledger_manager.watchers[LEDGER]):
        callback(None)  # what the ledger manager reports once the znode is gone
    with pytest.raises(NoSuchLedgerError):
        await asyncio.wait_for(consumer, 5)
    assert received == [0, 1]


async def test_cancelled_tail_cancels_its_lac_long_poll() -> None:
    """A tail cancelled while it waits in the quorum long poll (a caller's timeout, a shutdown)
    must take that poll down with it: left running, the poll's later failure was logged as
    "Task exception was never retrieved" (found by ``pybk verify``: a tailing reader's log held
    that traceback after a bookie was partitioned)."""
    ctx = make_cluster(3, long_poll_timeout_s=0.01)  # the stride polls give up at once
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    rh = open_handle(ctx, writer)
    entered = asyncio.Event()
    outcome: list[str] = []

    async def parked_poll(previous_lac: int, timeout: float) -> None:  # noqa: ASYNC109
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    rh.read_lac_long_poll = parked_poll  # type: ignore[assignment,method-assign]

    async def consume() -> None:
        async for _ in rh.tail(0):
            pass

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(entered.wait(), 5)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    for _ in range(5):
        await asyncio.sleep(0)
    assert outcome == ["cancelled"]


@pytest.mark.parametrize("standing", [True, False], ids=["standing-polls", "bookies-answering-once"])
async def test_steady_tail_costs_one_poll_request_per_bookie_not_one_per_entry(standing: bool) -> None:
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    for bookie in ctx.bookies.values():
        bookie.standing_polls = standing
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    rh = open_handle(ctx, writer)
    received: list[LedgerEntry] = []
    arrived = asyncio.Event()

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry)
            arrived.set()

    consumer = asyncio.ensure_future(consume())
    writer.write(1)
    for n in range(1, 40):
        writer.write(1)  # entry n carries LAC n - 1: entry n - 1 becomes visible
        await writer.notify()
        async with asyncio.timeout(5):
            while len(received) < n:
                arrived.clear()
                await arrived.wait()
    reads = [r for b in ctx.bookies.values() for r in b.reads]
    batch_reads = [r for b in ctx.bookies.values() for r in b.batch_reads]
    polls = [p for b in ctx.bookies.values() for p in b.stride_polls]
    answers = sum(b.stride_answers for b in ctx.bookies.values())
    assert (reads, batch_reads) == ([], [])  # no fan-out, no follow-up reads
    assert answers <= 39 + 3  # one per delivered entry plus one parked per bookie
    if standing:  # each bookie's poll stands for its share of the window: 39 entries, 3 requests
        assert len(polls) == 3
    else:  # a bookie that predates standing polls: a new request after every answer
        assert len(polls) == answers
    await close_ledger(ctx, writer)
    await asyncio.wait_for(consumer, 5)
    assert [e.entry_id for e in received] == list(range(40))


async def test_head_stalled_on_a_bookie_that_missed_the_lac_is_answered_by_the_ensemble() -> None:
    # A burst: entries 0..5 were sent before any was acknowledged, so they all carry LAC -1; entry
    # 6 then carries LAC 5 but is stored only on bookies 0 and 1. Bookie 2 never learns that 1..5
    # are committed, yet it is the preferred poll target for entries 1 and 4.
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(6, confirm=False)
    writer.lac = 5
    writer.write(1, confirm=False)
    rh = open_handle(ctx, writer)
    received: list[int] = []
    five = asyncio.Event()

    async def consume() -> None:
        async for entry in rh.tail(1):
            received.append(entry.entry_id)
            if len(received) == 5:
                five.set()

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(five.wait(), 5)  # far less than the 30 s a parked poll would take
    assert received == [1, 2, 3, 4, 5]
    assert rh.last_add_confirmed == 5
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer


async def test_head_answered_after_a_wait_is_yielded_at_once_not_after_the_fan_out_delay() -> None:
    # The head poll is still parked when the pipeline looks at it; it is answered a moment later.
    # The pipeline must hand the entry out then, not sit out the whole fan-out delay first.
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    pipeline = StridePolls(
        ctx, digest, writer.metadata, LEDGER, 0, 4, 30.0, asyncio.Event(), fan_out_delay_s=60.0
    )
    entries = pipeline.entries()
    first = asyncio.ensure_future(anext(entries))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not first.done()  # parked: nothing is committed yet
    writer.write(2)  # entry 1 carries LAC 0
    await writer.notify()
    entry = await asyncio.wait_for(first, 5)  # 60 s if it waited for the fan-out
    assert (entry.entry_id, entry.data) == (0, payload(0))
    await entries.aclose()


async def test_a_run_of_entries_confirmed_at_once_comes_in_one_answer_per_bookie() -> None:
    # After a pause (say a disk stall held the writer's acks) 30 entries become visible at once:
    # the reader must not pay a poll per entry exactly when it is furthest behind.
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    rh = open_handle(ctx, writer)
    received: list[int] = []
    all_in = asyncio.Event()

    async def consume() -> None:
        async for entry in rh.tail(0):
            received.append(entry.entry_id)
            if len(received) == 30:
                all_in.set()

    consumer = asyncio.ensure_future(consume())
    for _ in range(20):
        await asyncio.sleep(0)
    writer.write(31)  # entry 30 carries LAC 29
    await writer.notify()
    await asyncio.wait_for(all_in.wait(), 5)
    assert received == list(range(30))
    polls = [p for b in ctx.bookies.values() for p in b.stride_polls]
    assert len(polls) == 3  # one standing per bookie, answered with its run, parked again
    assert sum(b.stride_answers for b in ctx.bookies.values()) == 6
    assert all(stride == 3 for _, _, stride in polls)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer


async def test_a_standing_poll_answered_past_its_count_is_given_up_there() -> None:
    # The window bounds what a tail buffers only if each standing poll brings at most what it
    # asked for: a bookie that goes on answering must not be listened to past that.
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    for bookie in ctx.bookies.values():
        bookie.past_count = True
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    pipeline = StridePolls(ctx, digest, writer.metadata, LEDGER, 0, 6, 30.0, asyncio.Event())
    entries = pipeline.entries()
    received: list[int] = []
    writer.write(1)
    for _ in range(30):
        writer.write(1)
        await writer.notify()
        received.append((await asyncio.wait_for(anext(entries), 5)).entry_id)
    await entries.aclose()
    assert received == list(range(30))
    polls = [p for b in ctx.bookies.values() for p in b.standing]
    assert len(polls) > 3  # each poll ended at its count; new ones followed
    assert all(p.taken <= p.max_count for p in polls)


async def test_a_slow_consumer_holds_at_most_the_bytes_ahead_bound() -> None:
    # A standing poll asks for the bookie's share of a 256-entry window; a consumer that stops
    # taking entries must not make the pipeline buffer all of it past max_bytes_ahead.
    ctx = make_cluster(3, long_poll_timeout_s=30.0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    size = len(payload(0))
    bound = 4 * size
    pipeline = StridePolls(
        ctx, digest, writer.metadata, LEDGER, 0, 256, 30.0, asyncio.Event(), max_bytes_ahead=bound
    )
    entries = pipeline.entries()
    writer.write(2)  # entry 1 carries LAC 0
    await writer.notify()
    assert (await asyncio.wait_for(anext(entries), 5)).entry_id == 0
    for _ in range(150):  # the consumer takes nothing meanwhile
        writer.write(1)
        await writer.notify()
        for _ in range(5):
            await asyncio.sleep(0)
    taken = sum(p.taken for b in ctx.bookies.values() for p in b.standing)
    assert (taken - 1) * size <= bound + 3 * size  # the bound, plus one answer per bookie
    received = [(await asyncio.wait_for(anext(entries), 5)).entry_id for _ in range(150)]
    assert received == list(range(1, 151))
    await entries.aclose()
