"""Re-replication of a lost bookie's fragments against memory bookies and a CAS store: which
entries are copied and where, byte for byte, and how the metadata swap behaves under races."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from tests.support.memory_cluster import (
    LEDGER,
    PASSWORD,
    FakeContext,
    Writer,
    make_cluster,
    make_metadata,
)

from bkclient.admin import BookKeeperAdmin
from bkclient.digest import DigestManager
from bkclient.distribution import RoundRobinDistribution
from bkclient.ops.replicate import Fragment, FragmentReplicator, fragments_with
from bkclient.rate_limiter import ByteRateLimiter
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkproto.errors import (
    BookieUnavailableError,
    IncorrectParameterError,
    LedgerRecoveryError,
    NoSuchLedgerError,
)
from bkproto.errors import TimeoutError as BKTimeoutError

B = [f"127.0.0.1:{3181 + i}" for i in range(6)]


def setup(
    ctx: FakeContext, segments: tuple[Segment, ...], entries_per_segment: list[int], write_quorum: int = 2
) -> LedgerMetadata:
    """Write each segment's entries to its ensemble, then store the closed metadata."""
    ensemble = list(segments[0].bookies)
    writer = Writer(ctx, make_metadata(ensemble, write_quorum, 2, segments=segments))
    for count in entries_per_segment:
        writer.write(count)
    md = make_metadata(ensemble, write_quorum, 2, segments=segments, state=LedgerState.CLOSED,
                       last_entry_id=writer.next_id - 1, length=writer.length)
    ctx.ledger_manager.ledgers[LEDGER] = Versioned(md, 1)
    return md


def replicator(
    ctx: FakeContext, md: LedgerMetadata, fragment: Fragment, targets: dict[int, str]
) -> FragmentReplicator:
    return FragmentReplicator(ctx, DigestManager(LEDGER, PASSWORD, DigestType.CRC32C), md, fragment, targets)


def test_fragments_are_the_segments_naming_a_lost_bookie_with_their_ranges() -> None:
    segments = (
        Segment(0, (B[0], B[1], B[2])), Segment(10, (B[3], B[1], B[2])), Segment(25, (B[3], B[4], B[0]))
    )
    md = make_metadata([B[0], B[1], B[2]], 2, 2, segments=segments)
    found = fragments_with(md, LEDGER, frozenset({B[0]}), 40)
    ranges = [(f.first_entry_id, f.last_entry_id, f.lost_slots) for f in found]
    assert ranges == [(0, 9, (0,)), (25, 40, (2,))]
    assert fragments_with(md, LEDGER, frozenset({B[5]}), 40) == []


async def test_a_lost_bookie_entries_are_copied_byte_for_byte_and_the_metadata_swapped() -> None:
    ctx = make_cluster(6)
    segments = (Segment(0, (B[0], B[1], B[2])), Segment(30, (B[3], B[1], B[0])))
    md = setup(ctx, segments, [30, 20])
    originals = dict(ctx.bookies[B[0]].entries[LEDGER])
    ctx.bookies[B[0]].down = True
    for fragment, target in zip(fragments_with(md, LEDGER, frozenset({B[0]}), 49), (B[4], B[5]), strict=True):
        current = ctx.ledger_manager.ledgers[LEDGER].value
        op = replicator(ctx, current, fragment, {fragment.lost_slots[0]: target})
        await op.run()
        held = ctx.bookies[target].entries[LEDGER]
        dist = RoundRobinDistribution(3, 2, 2)
        expected = [e for e in range(fragment.first_entry_id, fragment.last_entry_id + 1)
                    if dist.has_entry(e, fragment.lost_slots[0])]
        assert sorted(held) == expected and op.entries_copied == len(expected)
        assert all(held[e] == originals[e] for e in expected)  # identical to the lost copies
        assert sorted(ctx.bookies[target].recovery_adds) == [(LEDGER, e) for e in expected]
    final = ctx.ledger_manager.ledgers[LEDGER].value
    assert [s.bookies for s in final.segments] == [(B[4], B[1], B[2]), (B[3], B[1], B[5])]
    assert B[0] not in final.all_bookies() and final.state == LedgerState.CLOSED


async def test_a_rate_limit_paces_every_copied_byte() -> None:
    ctx = make_cluster(6)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [30])
    ctx.bookies[B[0]].down = True
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 29)
    waited: list[float] = []
    now = [0.0]

    async def sleep(seconds: float) -> None:  # a fake clock: the test takes no time
        waited.append(seconds)
        now[0] += seconds

    limiter = ByteRateLimiter(10_000, clock=lambda: now[0], sleep=sleep)
    op = FragmentReplicator(ctx, DigestManager(LEDGER, PASSWORD, DigestType.CRC32C), md, fragment,
                            {0: B[4]}, limiter)
    await op.run()
    copied = ctx.bookies[B[4]].entries[LEDGER]
    sizes = [len(body) for body in copied.values()]
    assert len(sizes) == op.entries_copied == 20  # two of every three entries had a copy on B0
    # every byte but the last entry's had to wait its turn at 10,000 bytes/s
    assert sum(waited) == pytest.approx((sum(sizes) - sizes[-1]) / 10_000)
    assert sorted(copied) == sorted(ctx.bookies[B[0]].entries[LEDGER])


async def test_bulk_reads_that_time_out_shrink_until_the_slow_bookie_serves_them() -> None:
    ctx = make_cluster(5)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [120])
    ctx.bookies[B[0]].down = True
    slow = ctx.bookies[B[1]]  # the only source of the entries B0 shared with it (residue 0)
    serve = slow.read_entries

    async def read_entries(ledger_id: int, first: int, max_count: int, max_bytes: int,
                           **kwargs: Any) -> list[bytes]:
        if max_count > 4:  # more than this takes longer than the read timeout
            slow.batch_reads.append((ledger_id, first, max_count))
            raise BKTimeoutError(f"bookie {B[1]}: request timed out")
        return await serve(ledger_id, first, max_count, max_bytes, **kwargs)

    slow.read_entries = read_entries  # type: ignore[method-assign]
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 119)
    op = replicator(ctx, md, fragment, {0: B[3]})
    await op.run()
    assert op.entries_copied == 80 and sorted(ctx.bookies[B[3]].entries[LEDGER]) == sorted(
        ctx.bookies[B[0]].entries[LEDGER])
    asked = [count for _, first, count in slow.batch_reads if first % 3 == 0]
    assert asked[:5] == [40, 20, 10, 5, 2]  # halved at each timeout ...
    assert set(asked[5:]) == {2} and len(asked) > 10  # ... and never back up to a size that timed out
    assert len(slow.reads) == 4  # the first entries of the timed-out chunks, read alone


async def test_an_entry_no_replica_holds_fails_the_fragment_and_leaves_the_metadata() -> None:
    ctx = make_cluster(5)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [12])
    del ctx.bookies[B[1]].entries[LEDGER][4]  # entry 4: on slots 1 and 2; slot 2 is lost
    ctx.bookies[B[2]].down = True
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[2]}), 11)
    with pytest.raises(LedgerRecoveryError, match=r"cannot re-replicate entries 0\.\.11"):
        await replicator(ctx, md, fragment, {2: B[3]}).run()
    assert ctx.ledger_manager.writes == []  # the metadata still names the lost bookie


async def test_the_swap_retries_on_a_concurrent_change_and_keeps_it() -> None:
    ctx = make_cluster(5)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [9])
    ctx.bookies[B[0]].down = True
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 8)
    op = replicator(ctx, md, fragment, {0: B[3]})
    await op.copy()
    # meanwhile someone else changes the metadata (here: custom metadata, a new version)
    other = Versioned(dataclasses.replace(md, custom_metadata={"k": b"v"}), 2)
    ctx.ledger_manager.ledgers[LEDGER] = other
    swapped = await op.swap_in_metadata()
    assert swapped.version == 3 and swapped.value.custom_metadata == {"k": b"v"}
    assert swapped.value.segments[0].bookies == (B[3], B[1], B[2])
    # a second run finds the slot already replaced: nothing to write
    assert (await op.swap_in_metadata()).version == 3


async def test_a_slot_another_run_filled_meanwhile_keeps_that_bookie() -> None:
    ctx = make_cluster(5)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [9])
    ctx.bookies[B[0]].down = True
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 8)
    op = replicator(ctx, md, fragment, {0: B[3]})
    await op.copy()
    # meanwhile another run copied the fragment to B[4] and swapped that in: our copies on B[3]
    # were acknowledged, but for a slot that no longer names the lost bookie
    ctx.ledger_manager.ledgers[LEDGER] = Versioned(md.replace_bookie(0, B[0], B[4]), 2)
    swapped = await op.swap_in_metadata()
    assert swapped.version == 2 and swapped.value.segments[0].bookies == (B[4], B[1], B[2])


async def test_an_empty_segment_copies_nothing_but_drops_the_lost_bookie() -> None:
    ctx = make_cluster(5)
    segments = (Segment(0, (B[1], B[2], B[3])), Segment(6, (B[0], B[2], B[3])))
    md = setup(ctx, segments, [6])  # closed at entry 5: the second segment holds nothing
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 5)
    assert fragment.entry_count == 0
    op = replicator(ctx, md, fragment, {0: B[4]})
    swapped = await op.run()
    assert op.entries_copied == 0 and LEDGER not in ctx.bookies[B[4]].entries
    assert swapped.value.segments[1].bookies == (B[4], B[2], B[3])


async def test_copies_go_in_chunks_at_most_two_per_lane_at_a_time() -> None:
    ctx = make_cluster(5, read_batch_max_entries=20)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [200])
    ctx.bookies[B[0]].down = True
    target = ctx.bookies[B[3]]
    target.gate.clear()  # the new bookie holds every add until released
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 199)
    run = asyncio.create_task(replicator(ctx, md, fragment, {0: B[3]}).run())
    for _ in range(50):
        await asyncio.sleep(0)
    # slot 0 holds entries e % 3 == 0 (copied from B[1]) and e % 3 == 2 (from B[2]): two lanes,
    # each with one chunk of 20 waiting for the new bookie and the next one read ahead
    reads = [r for b in (B[1], B[2]) for r in ctx.bookies[b].batch_reads]
    assert sorted(reads) == [(LEDGER, 0, 20), (LEDGER, 2, 20), (LEDGER, 60, 20), (LEDGER, 62, 20)]
    assert not any(bookie.reads for bookie in ctx.bookies.values())  # no entry read alone
    target.gate.set()
    await run
    assert len(target.entries[LEDGER]) == 133  # slot 0 holds entries 0, 2, 3, 5, ... (e % 3 != 1)
    assert len(ctx.bookies[B[1]].batch_reads) == len(ctx.bookies[B[2]].batch_reads) == 4  # 67 and 66 entries


async def test_a_corrupt_copy_ends_a_chunk_and_the_next_replica_serves_the_rest() -> None:
    ctx = make_cluster(5)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [30], write_quorum=3)
    originals = dict(ctx.bookies[B[0]].entries[LEDGER])
    ctx.bookies[B[0]].down = True
    ctx.bookies[B[1]].corrupt.add((LEDGER, 6))
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 29)
    await replicator(ctx, md, fragment, {0: B[3]}).run()
    assert ctx.bookies[B[3]].entries[LEDGER] == originals  # entry 6 too, the good copy
    assert (LEDGER, 6, 8) in ctx.bookies[B[2]].batch_reads  # the rest of that lane (6, 9, ... 27) from B[2]


async def test_a_new_bookie_that_never_acknowledges_fails_the_fragment_in_time() -> None:
    ctx = make_cluster(5, add_entry_timeout_s=0.2)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [5])
    ctx.bookies[B[0]].down = True
    ctx.bookies[B[3]].gate.clear()  # takes the adds and never answers
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 4)
    async with asyncio.timeout(5):
        with pytest.raises(LedgerRecoveryError, match=r"not acknowledged in 0\.2 s"):
            await replicator(ctx, md, fragment, {0: B[3]}).run()
    assert ctx.ledger_manager.writes == []


class _DeletedLedgers:
    """A client whose only ledger is deleted between the listing and the metadata read."""

    async def list_ledgers(self) -> list[int]:
        return [LEDGER]

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        raise NoSuchLedgerError(f"ledger {ledger_id}")


async def test_a_ledger_deleted_meanwhile_is_not_a_failure() -> None:
    admin = BookKeeperAdmin(_DeletedLedgers())  # type: ignore[arg-type]
    assert await admin.recover_bookies([B[0]]) == []
    with pytest.raises(IncorrectParameterError, match="is not host:port"):
        await admin.recover_bookies(["no-port"])


async def test_a_failed_copy_cancels_the_rest_of_its_chunk() -> None:
    ctx = make_cluster(5, add_entry_timeout_s=30)
    md = setup(ctx, (Segment(0, (B[0], B[1], B[2])),), [60])
    ctx.bookies[B[0]].down = True
    target = ctx.bookies[B[3]]
    held = asyncio.Event()

    def add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False) -> Any:
        if entry_id == 0:  # the first copy fails at once, the others hang
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(BookieUnavailableError("bookie gone"))
            return failed
        return asyncio.ensure_future(held.wait())

    target.add = add  # type: ignore[method-assign]
    (fragment,) = fragments_with(md, LEDGER, frozenset({B[0]}), 59)
    with pytest.raises(LedgerRecoveryError, match="bookie gone"):
        await asyncio.wait_for(replicator(ctx, md, fragment, {0: B[3]}).copy(), 5)
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if "_write" in repr(t.get_coro())]
    assert left == []  # no copy keeps running after the fragment failed
    held.set()
