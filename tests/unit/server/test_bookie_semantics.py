"""BookKeeper's rules in the bookie core: statuses for bad input, master key, fencing, LAC, reads.

Every test taking ``bookie`` runs over both storages (see ``conftest.host``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.storage_helpers import (
    KEY,
    OTHER_KEY,
    BookieHost,
    add_all,
    add_op,
    body,
    lac_body,
    make_bookie,
    make_config,
    status_of,
)

from bkproto.v1 import bookie_pb2
from bookie.api import AddOp
from bookie.bookie import Bookie
from bookie.errors import BookieError


@pytest.fixture
async def bookie(host: BookieHost) -> AsyncIterator[Bookie]:
    async with host.bookie() as b:
        yield b


async def test_bad_adds_get_their_own_status_and_others_succeed(bookie: Bookie) -> None:
    good = add_op(1, 0)
    ops = [
        good,
        AddOp(1, 1, KEY, body(1, 2)),  # header entry id mismatch
        AddOp(1, 1, KEY, body(2, 1)),  # header ledger id mismatch
        AddOp(-1, 0, KEY, body(-1, 0)),  # negative ledger
        AddOp(1, -5, KEY, body(1, -5)),  # negative entry
        AddOp(1, 3, KEY, b"short"),  # shorter than the header
        AddOp(1, 4, b"k" * 7, body(1, 4)),  # wrong-size master key
        add_op(1, 5),
    ]
    statuses = [r.status for r in await bookie.add_entries(ops)]
    assert statuses == [0] + [bookie_pb2.EBADREQ] * 6 + [0]
    results = await bookie.add_entries(ops[1:2])
    assert "header" in results[0].message
    assert await bookie.read_entry(1, 0) == good.body
    assert await status_of(bookie.read_entry(1, 1)) == bookie_pb2.ENOENTRY
    assert await bookie.list_entries(1) == [(0, 0), (5, 5)]


async def test_master_key_is_recorded_by_first_add_and_checked(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(2, 0)])
    results = await bookie.add_entries([add_op(2, 1, key=OTHER_KEY)])
    assert results[0].status == bookie_pb2.EUA
    assert await status_of(bookie.fence(2, OTHER_KEY)) == bookie_pb2.EUA
    assert await status_of(bookie.write_lac(2, 0, OTHER_KEY, lac_body(2, 0))) == bookie_pb2.EUA
    assert await status_of(bookie.read_entry(2, 1)) == bookie_pb2.ENOENTRY


async def test_fenced_ledger_refuses_adds_but_takes_recovery_adds(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(3, 0)])
    await bookie.fence(3, KEY)
    await bookie.fence(3, KEY)  # idempotent
    assert (await bookie.add_entries([add_op(3, 1)]))[0].status == bookie_pb2.EFENCED
    assert (await bookie.add_entries([add_op(3, 1, recovery=True)]))[0].status == bookie_pb2.EOK
    assert await bookie.read_entry(3, 1) == body(3, 1)


async def test_fence_of_unknown_ledger_locks_out_a_writer_with_another_key(bookie: Bookie) -> None:
    await bookie.fence(4, OTHER_KEY)
    assert (await bookie.add_entries([add_op(4, 0)]))[0].status == bookie_pb2.EUA
    assert (await bookie.add_entries([add_op(4, 0, key=OTHER_KEY)]))[0].status == bookie_pb2.EFENCED


async def test_reads_of_unknown_ledgers_and_past_the_end(bookie: Bookie) -> None:
    assert await status_of(bookie.read_entry(99, 0)) == bookie_pb2.ENOLEDGER
    assert await status_of(bookie.read_entry(99, -1)) == bookie_pb2.ENOLEDGER
    assert await status_of(bookie.read_lac(99)) == bookie_pb2.ENOLEDGER
    assert await status_of(bookie.force_ledger(99)) == bookie_pb2.ENOLEDGER
    assert await status_of(bookie.read_entry(-3, 0)) == bookie_pb2.EBADREQ
    await add_all(bookie, [add_op(5, e, e - 1) for e in range(3)])
    assert await status_of(bookie.read_entry(5, 3)) == bookie_pb2.ENOENTRY
    assert await bookie.read_entry(5, -1) == body(5, 2, 1)
    assert bookie.last_add_confirmed(99) == -1


async def test_read_entries_stops_at_gap_count_and_bytes(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(6, e) for e in (0, 1, 2, 3, 5)])
    assert await bookie.read_entries(6, 0, 10, 1 << 20) == [body(6, e) for e in range(4)]
    assert await bookie.read_entries(6, 1, 2, 1 << 20) == [body(6, 1), body(6, 2)]
    one = len(body(6, 0))
    assert await bookie.read_entries(6, 0, 10, one * 2 + 1) == [body(6, 0), body(6, 1)]
    assert await bookie.read_entries(6, 0, 10, 1) == [body(6, 0)]  # always at least one
    assert await status_of(bookie.read_entries(6, 4, 10, 1 << 20)) == bookie_pb2.ENOENTRY


async def test_lac_is_max_of_piggybacked_and_explicit(bookie: Bookie) -> None:
    assert bookie.last_add_confirmed(7) == -1
    await add_all(bookie, [add_op(7, 0, -1), add_op(7, 1, 0), add_op(7, 2, 1)])
    assert bookie.last_add_confirmed(7) == 1
    assert bookie.lac_update_timestamp(7) > 0
    await bookie.write_lac(7, 2, KEY, lac_body(7, 2))
    assert bookie.last_add_confirmed(7) == 2
    await bookie.write_lac(7, 0, KEY, lac_body(7, 0))  # an older explicit LAC never moves it back
    assert bookie.last_add_confirmed(7) == 2
    info = await bookie.read_lac(7)
    assert info.explicit_lac_body == lac_body(7, 0)
    assert info.last_entry_body == body(7, 2, 1)
    assert await status_of(bookie.write_lac(7, 5, KEY, lac_body(7, 4))) == bookie_pb2.EBADREQ
    assert await status_of(bookie.write_lac(7, 5, KEY, b"tiny")) == bookie_pb2.EBADREQ


async def test_long_poll_wakes_on_a_later_add(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(8, 0, -1)])
    waiter = asyncio.create_task(bookie.wait_for_lac(8, -1, 30.0))
    await asyncio.sleep(0)
    assert not waiter.done()
    await add_all(bookie, [add_op(8, 1, 0)])
    assert await waiter == 0
    assert bookie.waiters.parked == 0


async def test_long_poll_wakes_on_explicit_lac(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(9, 0, -1)])
    waiter = asyncio.create_task(bookie.wait_for_lac(9, -1, 30.0))
    await asyncio.sleep(0)
    await bookie.write_lac(9, 0, KEY, lac_body(9, 0))
    assert await waiter == 0


async def test_long_poll_returns_current_lac_at_timeout(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(10, 0, -1), add_op(10, 1, 0)])
    assert await bookie.wait_for_lac(10, 0, 0.05) == 0
    assert bookie.waiters.parked == 0
    assert await bookie.wait_for_lac(10, -1, 30.0) == 0  # already past: no wait


async def test_long_poll_waiters_are_bounded(host: BookieHost) -> None:
    async with host.bookie(max_lac_waiters=2) as b:
        await add_all(b, [add_op(11, 0)])
        parked = [asyncio.create_task(b.wait_for_lac(11, -1, 30.0)) for _ in range(2)]
        await asyncio.sleep(0)
        assert await status_of(b.wait_for_lac(11, -1, 30.0)) == bookie_pb2.ETOOMANYREQUESTS
        await add_all(b, [add_op(11, 1, 0)])
        assert await asyncio.gather(*parked) == [0, 0]


async def test_read_only_bookie_refuses_adds_but_recovery_adds(bookie: Bookie) -> None:
    bookie.set_write_mode(read_only=True)
    assert bookie.read_only
    results = await bookie.add_entries([add_op(12, 0), add_op(12, 1, recovery=True)])
    assert [r.status for r in results] == [bookie_pb2.EREADONLY, bookie_pb2.EOK]
    assert await bookie.read_entry(12, 1) == body(12, 1)
    bookie.set_write_mode(read_only=True, high_priority_writes=False)  # e.g. no room left at all
    refused = await bookie.add_entries([add_op(12, 2, recovery=True)])
    assert refused[0].status == bookie_pb2.EREADONLY
    bookie.set_write_mode(read_only=False)
    await add_all(bookie, [add_op(12, 2)])


async def test_misshapen_adds_keep_their_status_when_the_batch_fails_before_validation(
    bookie: Bookie,
) -> None:
    # The handlers leave these checks to the core (BookieCore.add_entries's contract), so a batch
    # refused as a whole must still answer each misshapen add with its own EBADREQ.
    misshapen = [AddOp(-1, 0, KEY, body(-1, 0)), AddOp(15, 1, KEY, b"short"), AddOp(15, 1, KEY, body(15, 2))]
    bookie.set_write_mode(read_only=True, high_priority_writes=False)
    refused = await bookie.add_entries([*misshapen, add_op(15, 0, recovery=True)])
    assert [r.status for r in refused] == [bookie_pb2.EBADREQ] * 3 + [bookie_pb2.EREADONLY]

    async def no_room(nbytes: int) -> None:
        raise BookieError(bookie_pb2.ETOOMANYREQUESTS, "no room")

    bookie.set_write_mode(read_only=True)
    bookie.storage.make_room = no_room  # type: ignore[method-assign]
    refused = await bookie.add_entries([*misshapen, add_op(15, 0), add_op(15, 0, recovery=True)])
    assert [r.status for r in refused] == [bookie_pb2.EBADREQ] * 3 + [
        bookie_pb2.EREADONLY,
        bookie_pb2.ETOOMANYREQUESTS,
    ]
    assert "negative" in refused[0].message and "header says" in refused[2].message


async def test_force_ledger_and_disk_info(bookie: Bookie) -> None:
    await add_all(bookie, [add_op(13, 0)])
    await bookie.force_ledger(13)
    info = bookie.disk_info()
    assert info.total_bytes > 0 and 0 < info.free_bytes <= info.total_bytes


async def test_storage_failure_is_eio_not_a_crash(tmp_path: Path) -> None:
    async with make_bookie(make_config(tmp_path)) as bookie:
        await add_all(bookie, [add_op(14, 0)])

        def broken(*args: object) -> object:
            raise OSError("disk on fire")

        bookie.storage.dirs[0].read_run = broken  # type: ignore[attr-defined]
        await bookie.storage.checkpoint()  # entry 0 now only on "disk"
        assert await status_of(bookie.read_entry(14, 0)) == bookie_pb2.EIO
