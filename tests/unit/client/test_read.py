"""Read path against memory bookies: ranges in order, batching, replica fallback on failure and
corruption, speculative reads, LAC reads with quorum coverage."""

from __future__ import annotations

import asyncio
import dataclasses
from itertools import accumulate
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
from bkclient.entry import LedgerEntry, ledger_entries
from bkclient.ops.read import (
    ReadChunkOp,
    ReadEntryOp,
    ReadRangeOp,
    Served,
    _interleaved,
    pick_failure,
    segment_end,
    write_set_bookies,
)
from bkclient.read_handle import ReadHandle
from bkmeta.model import LedgerState, Segment, Versioned
from bkproto.errors import (
    BookieUnavailableError,
    DigestMismatchError,
    IncorrectParameterError,
    NoSuchEntryError,
    ReadError,
)


def handle(ctx: FakeContext, writer: Writer, version: int = 1) -> ReadHandle:
    ctx.ledger_manager.ledgers[LEDGER] = Versioned(writer.metadata, version)
    return ReadHandle(
        ctx,
        LEDGER,
        Versioned(writer.metadata, version),
        DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type),
    )


async def collect(it: object) -> list[LedgerEntry]:
    return [e async for e in it]  # type: ignore[attr-defined]


def closed(writer: Writer) -> Writer:
    writer.metadata = writer.metadata.with_closed(writer.lac, writer.length)
    return writer


async def test_striped_range_reads_every_entry_in_order() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(50)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(0, 49))
    assert [e.entry_id for e in entries] == list(range(50))
    assert all(e.data == payload(e.entry_id) and e.ledger_id == LEDGER for e in entries)


@pytest.mark.parametrize(
    ("bookies", "qw", "first", "last"), [(3, 2, 0, 2999), (5, 3, 7, 1234), (4, 2, 5, 6), (4, 2, 0, 2999)]
)
async def test_striped_ranges_are_read_in_strided_batches_from_every_bookie(
    bookies: int, qw: int, first: int, last: int
) -> None:
    """E > Qw: each bookie holds Qw of every E entries, so a block is read as E strided chunks
    (one per residue modulo E, each from a replica of that residue) and interleaved back."""
    ctx = make_cluster(bookies, read_batch_max_entries=100)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), qw, qw))
    writer.write(last + 10)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(first, last))
    assert [e.entry_id for e in entries] == list(range(first, last + 1))
    assert [e.data for e in entries] == [payload(i) for i in range(first, last + 1)]
    calls = [b for bookie in ctx.bookies.values() for b in bookie.batch_strides]
    assert calls and set(calls) == {bookies}  # every call strided by E
    assert not any(b.reads for b in ctx.bookies.values())  # no entry read on its own
    if last - first > 1000:
        assert all(b.batch_reads for b in ctx.bookies.values())  # the load is spread
        assert max(n for b in ctx.bookies.values() for _, _, n in b.batch_reads) <= 100  # per call


@pytest.mark.parametrize("qw", [3, 2])
async def test_a_range_read_holds_a_few_answers_not_its_whole_block(qw: int) -> None:
    """Blocks are counted in entries (1000 by default); with big entries that would be gigabytes
    in flight. A chunk stops once it holds read_batch_max_bytes, and the range reads the rest of
    its block before going on."""
    ctx = make_cluster(3, read_batch_max_entries=1000, read_batch_max_bytes=720)  # ~10 bodies a call
    writer = Writer(ctx, make_metadata(list(ctx.bookies), qw, 2))
    writer.write(600)
    served = 0
    for bookie in ctx.bookies.values():
        real = bookie.read_entries

        async def counting(*args: object, _real: object = real, **kwargs: object) -> list[bytes]:
            nonlocal served
            bodies: list[bytes] = await _real(*args, **kwargs)  # type: ignore[operator]
            served += len(bodies)
            return bodies

        bookie.read_entries = counting  # type: ignore[method-assign]
    rh = handle(ctx, closed(writer))
    ahead = []
    got = []
    async for entry in rh.read(0, 599):
        got.append(entry.entry_id)
        ahead.append(served - len(got))
    assert got == list(range(600))
    # one answer of ~10 entries per chunk in flight (3 chunks, or 3 blocks of 3 strided chunks),
    # and the entries of one block's answers being handed out: not 600
    chunks_in_flight = 3 if qw == 3 else 9
    assert max(ahead) <= (chunks_in_flight + 3) * 10


async def test_striped_batch_falls_back_per_residue_and_stops_at_the_unreadable_entry() -> None:
    ctx = make_cluster(3, read_batch_max_entries=60, read_batch_max_bytes=200)  # short answers too
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(300)
    down, corrupt = write_set_bookies(writer.metadata, 100)
    ctx.bookies[down].down = True
    ctx.bookies[corrupt].corrupt.add((LEDGER, 100))
    rh = handle(ctx, closed(writer))
    got: list[int] = []
    with pytest.raises(DigestMismatchError):
        async for entry in rh.read(0, 299):
            got.append(entry.entry_id)
    assert got == list(range(100))  # every entry before the unreadable one, in order
    ctx.bookies[down].down = False
    entries = await collect(rh.read(0, 299))
    assert [e.data for e in entries] == [payload(i) for i in range(300)]


@pytest.mark.parametrize("in_lists", [False, True])
async def test_a_missing_entry_ends_a_striped_read_with_no_such_entry(in_lists: bool) -> None:
    ctx = make_cluster(3, read_batch_max_entries=30)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(100)
    for bookie_id in write_set_bookies(writer.metadata, 41):
        del ctx.bookies[bookie_id].entries[LEDGER][41]
    rh = handle(ctx, closed(writer))
    got: list[int] = []
    with pytest.raises(NoSuchEntryError):  # in lists too: the entries before the missing one first
        if in_lists:
            async for batch in rh.read_batches(0, 99):
                got += [entry.entry_id for entry in batch]
        else:
            async for entry in rh.read(0, 99):
                got.append(entry.entry_id)
    assert got == list(range(41))


@pytest.mark.parametrize(("ensemble", "qw"), [(3, 2), (2, 2)])
async def test_read_batches_are_the_range_in_lists_of_at_most_a_request(ensemble: int, qw: int) -> None:
    ctx = make_cluster(ensemble, read_batch_max_entries=30)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), qw, 2))
    writer.write(200)
    rh = handle(ctx, closed(writer))
    lists = [batch async for batch in rh.read_batches(5, 194)]
    per_request = 30 if ensemble == qw else 30 * ensemble  # a striped block: E chunks of 30
    assert len(lists) > 1 and all(0 < len(batch) <= per_request for batch in lists)
    assert [e for batch in lists for e in batch] == await collect(rh.read(5, 194))


async def test_striped_blocks_do_not_cross_segments() -> None:
    ctx = make_cluster(6)
    ids = list(ctx.bookies)
    segments = (Segment(0, tuple(ids[:3])), Segment(20, tuple(ids[3:])))
    writer = Writer(ctx, make_metadata(ids[:3], 2, 2, segments=segments))
    writer.write(50)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(3, 44))
    assert [e.data for e in entries] == [payload(i) for i in range(3, 45)]
    for bookie_id in ids[:3]:  # the first ensemble is never asked past entry 19
        assert all(first + 3 * (n - 1) <= 19 for _, first, n in ctx.bookies[bookie_id].batch_reads)
    assert all(first >= 20 for b in ids[3:] for _, first, _ in ctx.bookies[b].batch_reads)


async def test_full_replication_uses_batched_reads_spread_over_replicas() -> None:
    ctx = make_cluster(3, read_batch_max_entries=100)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 3, 2))
    writer.write(450)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(0, 449))
    assert [e.data for e in entries] == [payload(i) for i in range(450)]
    assert all(b.batch_reads for b in ctx.bookies.values())  # chunks went to every replica
    assert not any(b.reads for b in ctx.bookies.values())


async def test_batched_read_falls_back_on_corrupt_and_down_replicas() -> None:
    ctx = make_cluster(3)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 3, 2))
    writer.write(300)
    ctx.bookies[ids[0]].corrupt.add((LEDGER, 150))
    ctx.bookies[ids[1]].corrupt.add((LEDGER, 150))
    ctx.bookies[ids[2]].down = True
    rh = handle(ctx, closed(writer))
    with pytest.raises(DigestMismatchError):
        await collect(rh.read(0, 299))  # entry 150: corrupt on both live replicas
    ctx.bookies[ids[1]].corrupt.clear()
    entries = await collect(rh.read(0, 299))
    assert [e.data for e in entries] == [payload(i) for i in range(300)]


async def test_a_slow_replica_gets_its_chunks_read_speculatively_elsewhere() -> None:
    ctx = make_cluster(3, read_batch_max_entries=100, speculative_read_timeout_s=0.01)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 3, 2))
    writer.write(450)
    ctx.bookies[ids[1]].gate.clear()  # hung: never answers until released
    rh = handle(ctx, closed(writer))
    entries = await asyncio.wait_for(collect(rh.read(0, 449)), 10)
    assert [e.data for e in entries] == [payload(i) for i in range(450)]
    assert ctx.bookies[ids[1]].batch_reads == []  # everything it was asked, others served
    assert ctx.bookies[ids[0]].batch_reads and ctx.bookies[ids[2]].batch_reads
    ctx.bookies[ids[1]].gate.set()


async def test_batches_do_not_cross_segments() -> None:
    ctx = make_cluster(4)
    ids = list(ctx.bookies)
    segments = (Segment(0, (ids[0], ids[1])), Segment(10, (ids[2], ids[3])))
    writer = Writer(ctx, make_metadata(ids[:2], 2, 2, segments=segments))
    writer.write(20)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(5, 14))
    assert [e.entry_id for e in entries] == list(range(5, 15))
    for bookie_id in ids[:2]:
        assert all(first + count <= 10 for _, first, count in ctx.bookies[bookie_id].batch_reads)


async def test_corrupt_copy_is_detected_and_served_by_another_replica() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(10)
    first_replica = write_set_bookies(writer.metadata, 4)[0]
    ctx.bookies[first_replica].corrupt.add((LEDGER, 4))
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(0, 9))
    assert entries[4].data == payload(4)
    assert (LEDGER, 4) not in ctx.bookies[first_replica].reads
    entry = await rh.read_entry(4)
    assert entry.data == payload(4)
    assert (LEDGER, 4) in ctx.bookies[first_replica].reads  # it was asked, and rejected


async def test_every_replica_corrupt_is_a_digest_error_not_missing() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    for bookie_id in write_set_bookies(writer.metadata, 1):
        ctx.bookies[bookie_id].corrupt.add((LEDGER, 1))
    rh = handle(ctx, closed(writer))
    with pytest.raises(DigestMismatchError):
        await rh.read_entry(1)


async def test_missing_everywhere_is_no_such_entry_and_down_is_unavailable() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    rh = handle(ctx, writer)
    with pytest.raises(NoSuchEntryError):
        await rh.read_entry(7)
    for bookie_id in write_set_bookies(writer.metadata, 2):
        ctx.bookies[bookie_id].down = True
    with pytest.raises(BookieUnavailableError):
        await rh.read_entry(2)


async def test_slow_replica_triggers_speculative_read_of_the_next() -> None:
    ctx = make_cluster(3, speculative_read_timeout_s=0.01)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(5)
    slow, fast = write_set_bookies(writer.metadata, 3)
    ctx.bookies[slow].gate.clear()  # never answers until released
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    op = ReadEntryOp(ctx, digest, LEDGER, 3, (slow, fast))
    read = await op.run()
    assert read.entry.data == payload(3)
    assert (LEDGER, 3) in ctx.bookies[fast].reads
    assert ctx.bookies[slow].reads == []  # still parked at the gate
    ctx.bookies[slow].gate.set()


async def test_without_speculation_a_slow_replica_is_waited_for() -> None:
    ctx = make_cluster(3, speculative_read_timeout_s=0)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(5)
    slow, fast = write_set_bookies(writer.metadata, 3)
    ctx.bookies[slow].gate.clear()
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    task = asyncio.ensure_future(ReadEntryOp(ctx, digest, LEDGER, 3, (slow, fast)).run())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    assert ctx.bookies[fast].reads == []
    ctx.bookies[slow].gate.set()
    assert (await task).entry.data == payload(3)


async def test_read_stops_at_lac_and_read_unconfirmed_goes_past() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(10)
    writer.write(2, confirm=False)  # entries 10, 11 written, never acknowledged
    rh = handle(ctx, writer)
    assert rh.last_add_confirmed == -1
    entries = await collect(rh.read(0, 8))  # beyond the local LAC: asks the bookies first
    assert [e.entry_id for e in entries] == list(range(9))
    assert rh.last_add_confirmed == 9  # entry 10 carries LAC 9
    with pytest.raises(ReadError):
        await collect(rh.read(0, 10))
    assert [e.entry_id for e in await collect(rh.read_unconfirmed(10, 11))] == [10, 11]
    assert await collect(rh.read(3, 2)) == []
    with pytest.raises(IncorrectParameterError):
        await collect(rh.read(-1, 2))


async def test_closed_ledger_lac_comes_from_metadata() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(4)
    rh = handle(ctx, closed(writer))
    assert rh.is_closed
    assert rh.last_add_confirmed == 3
    assert rh.length == writer.length
    for bookie in ctx.bookies.values():
        bookie.down = True
    assert await rh.read_last_add_confirmed() == 3  # no bookie needed


async def test_lac_read_needs_quorum_coverage() -> None:
    ctx = make_cluster(3)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 2, 2))
    writer.write(20)
    rh = handle(ctx, writer)
    ctx.bookies[ids[0]].down = True  # E3 Qw2 Qa2: one unknown per window is fine
    assert await rh.read_last_add_confirmed() == 18
    ctx.bookies[ids[1]].down = True
    with pytest.raises(BookieUnavailableError):
        await rh.read_last_add_confirmed()
    assert rh.last_add_confirmed == 18  # never goes back


async def test_try_read_lac_does_not_wait_for_a_slow_bookie() -> None:
    ctx = make_cluster(3)
    ids = list(ctx.bookies)
    writer = Writer(ctx, make_metadata(ids, 2, 2))
    writer.write(20)
    rh = handle(ctx, writer)
    ctx.bookies[ids[0]].gate.clear()
    ctx.bookies[ids[1]].gate.clear()
    assert await rh.try_read_last_add_confirmed() == 18
    ctx.bookies[ids[0]].gate.set()
    ctx.bookies[ids[1]].gate.set()


async def test_long_poll_returns_the_piggybacked_entry() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(5)
    rh = handle(ctx, writer)
    poll = asyncio.ensure_future(rh.read_lac_long_poll(3, 5.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not poll.done()  # every bookie's LAC is 3 (entry 4 carries LAC 3): parked
    writer.write(1)  # entry 5 carries LAC 4
    await writer.notify()
    result = await poll
    assert result.last_add_confirmed == 4
    assert result.entry is not None and result.entry.entry_id == 4 and result.entry.data == payload(4)
    assert rh.last_add_confirmed == 4


async def test_long_poll_times_out_without_progress() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(5)
    rh = handle(ctx, writer)
    result = await rh.read_lac_long_poll(3, 0.01)
    assert result.last_add_confirmed == 3 and result.entry is None


async def test_range_op_stops_early_without_leaking_tasks() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 3, 2))
    writer.write(500)
    digest = DigestManager(LEDGER, PASSWORD, writer.metadata.digest_type)
    gen = ReadRangeOp(ctx, digest, writer.metadata, LEDGER, 0, 499).entries()
    got = []
    async for entry in gen:
        got.append(entry.entry_id)
        if len(got) == 3:
            break
    await gen.aclose()
    assert got == [0, 1, 2]
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for _ in range(5):
        await asyncio.sleep(0)
    assert all(t.done() for t in pending)


async def test_update_metadata_ignores_older_versions() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(3)
    rh = handle(ctx, writer, version=5)
    rh.update_metadata(Versioned(writer.metadata.with_closed(2, writer.length), 4))
    assert not rh.is_closed
    rh.update_metadata(Versioned(writer.metadata.with_closed(2, writer.length), 6))
    assert rh.is_closed and rh.last_add_confirmed == 2 and rh.length == writer.length
    assert rh.metadata.state == LedgerState.CLOSED


async def test_explicit_lac_known_to_the_bookies_counts() -> None:
    ctx = make_cluster(3)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), 2, 2))
    writer.write(5)  # entry 4 carries LAC 3
    for bookie in ctx.bookies.values():
        await bookie.write_lac(LEDGER, 4, writer.digest.master_key, b"")  # the writer's explicit LAC flush
    rh = handle(ctx, writer)
    assert await rh.read_last_add_confirmed() == 4
    assert [e.entry_id async for e in rh.read(0, 4)] == list(range(5))


def test_read_failure_is_reported_by_its_most_telling_cause() -> None:
    absent = NoSuchEntryError("a")
    down = BookieUnavailableError("b")
    corrupt = DigestMismatchError("c")
    assert isinstance(pick_failure(1, 2, [absent, absent]), NoSuchEntryError)
    assert isinstance(pick_failure(1, 2, [absent, down]), BookieUnavailableError)
    assert isinstance(pick_failure(1, 2, [down, corrupt, absent]), DigestMismatchError)
    assert "entry 2" in str(pick_failure(1, 2, [down]))
    assert isinstance(pick_failure(1, 2, []), ReadError)


def test_segment_end() -> None:
    md = make_metadata(["a", "b"], 2, 2, segments=(Segment(0, ("a", "b")), Segment(10, ("c", "b"))))
    assert segment_end(md, 0) == 9
    assert segment_end(md, 9) == 9
    assert segment_end(md, 10) is None


def test_ledger_entries_equal_the_entries_built_one_by_one() -> None:
    payloads = [b"a", b"", b"ccc"]
    made = ledger_entries(4, 10, 3, payloads)
    assert made == [LedgerEntry(4, 10, b"a"), LedgerEntry(4, 13, b""), LedgerEntry(4, 16, b"ccc")]
    assert [hash(e) for e in made] == [hash(LedgerEntry(4, 10 + 3 * i, p)) for i, p in enumerate(payloads)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].entry_id = 11  # type: ignore[misc]


class _Chunk:
    """A stand-in for ReadChunkOp: ``run`` gives what its chunk served."""

    def __init__(self, served: Served) -> None:
        self.served = served

    async def run(self) -> Served:
        return self.served


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from(["none", "error", "short"])), min_size=1, max_size=5
    )
)
def test_a_striped_block_interleaves_its_chunks_up_to_the_first_entry_missing(
    chunks: list[tuple[int, str]],
) -> None:
    stride = len(chunks)
    errors = [
        NoSuchEntryError(f"chunk {r}") if kind == "error" else None for r, (_, kind) in enumerate(chunks)
    ]
    served = [
        Served(
            ledger_entries(LEDGER, r, stride, [b"%d" % (r + k * stride) for k in range(count)]),
            error,
            kind == "short",
        )
        for r, ((count, kind), error) in enumerate(zip(chunks, errors, strict=True))
    ]
    # entry by entry: chunk r's k-th entry is entry k * stride + r; the first one missing ends it
    expected: list[LedgerEntry] = []
    while len(served[len(expected) % stride].entries) > len(expected) // stride:
        expected.append(served[len(expected) % stride].entries[len(expected) // stride])
    stopped = served[len(expected) % stride]
    got = asyncio.run(_interleaved(cast(list[ReadChunkOp], [_Chunk(s) for s in served])))
    assert got.entries == expected
    assert [e.entry_id for e in got.entries] == list(range(len(expected)))
    assert (got.error, got.short) == (stopped.error, stopped.short)


@pytest.mark.parametrize("qw", [3, 2])
async def test_a_range_asks_for_less_at_first_so_that_its_first_entries_come_sooner(qw: int) -> None:
    """The first three blocks ask for an eighth, a quarter and half of a full request, then every
    block asks for a full one (a striped block: one such chunk per residue)."""
    ctx = make_cluster(3, read_batch_max_entries=80)
    writer = Writer(ctx, make_metadata(list(ctx.bookies), qw, 2))
    writer.write(2000)
    rh = handle(ctx, closed(writer))
    entries = await collect(rh.read(0, 1999))
    assert [e.entry_id for e in entries] == list(range(2000))
    asked = sorted(call[1:] for bookie in ctx.bookies.values() for call in bookie.batch_reads)
    chunks = 1 if qw == 3 else 3  # per block
    sizes = [80 // 8, 80 // 4, 80 // 2] + [80] * 2
    expected_firsts = list(accumulate((n * chunks for n in sizes), initial=0))[:-1]
    block_firsts = [first for first, _ in asked][::chunks][: len(sizes)]
    assert block_firsts == expected_firsts
    assert [count for _, count in asked][::chunks][: len(sizes)] == sizes
