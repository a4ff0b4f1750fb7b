"""The simulation's MemoryLedgerStorage under the bookie core: what a crash keeps (only what was
synced, plus a torn prefix when asked), group commit, a failing disk, checkpoints, process kills."""

from __future__ import annotations

import asyncio
import random

import pytest
from tests.support.storage_helpers import (
    KEY,
    OTHER_KEY,
    GatedSync,
    InMemoryHost,
    add_all,
    add_op,
    body,
    lac_body,
    settle,
    status_of,
)

from bkproto.v1 import bookie_pb2
from bookie.api import AddResult
from bookie.bookie import Bookie


async def _entries(bookie: Bookie, ledger_id: int) -> list[int]:
    """Ids of the entries the bookie serves for the ledger (none if it does not know it)."""
    if bookie.last_add_confirmed(ledger_id) == -1 and await status_of(bookie.read_lac(ledger_id)) != 0:
        return []
    return [e for first, last in await bookie.list_entries(ledger_id) for e in range(first, last + 1)]


def _statuses(results: list[AddResult]) -> list[int]:
    return [r.status for r in results]


async def test_a_crash_keeps_synced_entries_and_loses_unsynced_ones() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    bookie = host.bookie()
    await bookie.start()
    await add_all(bookie, [add_op(1, e, e - 1) for e in range(5)])
    gate.hold()
    pending = asyncio.create_task(bookie.add_entries([add_op(1, 5, 4), add_op(2, 0)]))
    await settle()
    assert not pending.done()
    assert await bookie.read_entry(1, 5) == body(1, 5, 4)  # readable before it is durable
    host.storage(bookie).crash()
    gate.release()
    assert _statuses(await pending) == [bookie_pb2.EIO, bookie_pb2.EIO]

    async with host.bookie() as reopened:
        assert await _entries(reopened, 1) == [0, 1, 2, 3, 4]
        assert await reopened.read_entry(1, -1) == body(1, 4, 3)
        assert reopened.last_add_confirmed(1) == 3
        assert await status_of(reopened.read_entry(2, 0)) == bookie_pb2.ENOLEDGER  # its key went too


async def test_a_synced_fence_survives_a_crash_and_an_unsynced_one_may_not() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    bookie = host.bookie()
    await bookie.start()
    await add_all(bookie, [add_op(3, 0), add_op(4, 0)])
    await bookie.fence(3, KEY)
    await bookie.fence(5, OTHER_KEY)  # a ledger the bookie never saw: fenced, with that key
    gate.hold()
    unsynced_fence = asyncio.create_task(bookie.fence(4, KEY))
    await settle()
    host.storage(bookie).crash()
    gate.release()
    assert await status_of(unsynced_fence) == bookie_pb2.EIO  # never acknowledged

    async with host.bookie() as reopened:
        assert _statuses(await reopened.add_entries([add_op(3, 1, 0)])) == [bookie_pb2.EFENCED]
        assert _statuses(await reopened.add_entries([add_op(3, 1, 0, recovery=True)])) == [0]
        assert _statuses(await reopened.add_entries([add_op(5, 0)])) == [bookie_pb2.EUA]
        assert _statuses(await reopened.add_entries([add_op(5, 0, key=OTHER_KEY)])) == [bookie_pb2.EFENCED]
        assert _statuses(await reopened.add_entries([add_op(4, 1, 0)])) == [0]


async def test_writes_arriving_during_a_sync_share_the_next_one() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    async with host.bookie() as bookie:
        await add_all(bookie, [add_op(6, 0)])
        gate.synced.clear()
        gate.hold()
        first = asyncio.create_task(bookie.add_entries([add_op(6, 1)]))
        await settle()
        later = [asyncio.create_task(bookie.add_entries([add_op(6, e)])) for e in (2, 3)]
        await settle()
        assert len(gate.synced) == 1  # the first sync is still running; the others wait for it
        gate.release()
        results = await asyncio.gather(first, *later)
        assert [_statuses(r) for r in results] == [[0], [0], [0]]
        record = len(body(6, 1)) + 9
        assert gate.synced == [record, 2 * record]


async def test_a_failing_sync_fails_the_writes_and_the_journal_for_good() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    async with host.bookie() as bookie:
        await add_all(bookie, [add_op(7, 0)])
        gate.failure = OSError("disk on fire")
        assert _statuses(await bookie.add_entries([add_op(7, 1)])) == [bookie_pb2.EIO]
        assert bookie.health.journal_failure is not None
        gate.failure = None
        assert _statuses(await bookie.add_entries([add_op(7, 2)])) == [bookie_pb2.EIO]
        assert await status_of(bookie.fence(7, KEY)) == bookie_pb2.EIO
        assert await bookie.read_entry(7, 0) == body(7, 0)  # reads still served


async def test_a_checkpoint_makes_unsynced_entries_durable() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    bookie = host.bookie()
    await bookie.start()
    gate.hold()
    pending = asyncio.create_task(bookie.add_entries([add_op(8, e) for e in range(3)]))
    await settle()
    await bookie.storage.checkpoint()  # as a write-cache flush does, journal synced or not
    host.storage(bookie).crash()
    gate.release()
    await pending  # its outcome is unknown to the client; the entries are on disk anyway
    async with host.bookie() as reopened:
        assert await _entries(reopened, 8) == [0, 1, 2]


async def test_a_process_kill_keeps_what_was_written_but_not_synced() -> None:
    """A new storage over the disk without a crash() is a killed process: the page cache (the
    disk's journal) keeps every record written, and the old storage answers nothing more."""
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    killed = host.bookie()
    await killed.start()
    gate.hold()
    pending = asyncio.create_task(killed.add_entries([add_op(9, 0)]))
    await settle()
    async with host.bookie() as restarted:
        assert await restarted.read_entry(9, 0) == body(9, 0)
        gate.release()
        assert _statuses(await pending) == [bookie_pb2.EIO]
        assert _statuses(await killed.add_entries([add_op(9, 1)])) == [bookie_pb2.EIO]


@pytest.mark.parametrize("seed", range(12))
async def test_a_torn_crash_keeps_a_prefix_of_the_unsynced_writes(seed: int) -> None:
    """Each unsynced write may have reached the disk before the crash, in write order; the one
    the crash cut in the middle fails its CRC and is dropped with everything after it."""

    async def crash_with_unsynced_writes() -> list[int]:
        gate = GatedSync()
        host = InMemoryHost(sync=gate)
        bookie = host.bookie()
        await bookie.start()
        await add_all(bookie, [add_op(10, 0)])
        gate.hold()
        pending = [asyncio.create_task(bookie.add_entries([add_op(10, e)])) for e in range(1, 9)]
        await settle()
        host.storage(bookie).crash(random.Random(seed))
        gate.release()
        await asyncio.gather(*pending)
        async with host.bookie() as reopened:
            found = await _entries(reopened, 10)
            assert [await reopened.read_entry(10, e) for e in found] == [body(10, e) for e in found]
            return found

    found = await crash_with_unsynced_writes()
    assert found == list(range(len(found))) and found[0] == 0  # a prefix, the synced entry first
    assert await crash_with_unsynced_writes() == found  # the seed decides, nothing else


async def test_torn_crashes_both_keep_and_lose_unsynced_writes() -> None:
    """Over a few seeds the torn crash is not "all or nothing": some keep part of the tail."""
    kept: set[int] = set()
    for seed in range(12):
        gate = GatedSync()
        host = InMemoryHost(sync=gate)
        bookie = host.bookie()
        await bookie.start()
        gate.hold()
        pending = [asyncio.create_task(bookie.add_entries([add_op(11, e)])) for e in range(8)]
        await settle()
        host.storage(bookie).crash(random.Random(seed))
        gate.release()
        await asyncio.gather(*pending)
        async with host.bookie() as reopened:
            kept.add(len(await _entries(reopened, 11)))
    assert len(kept - {0, 8}) > 0


async def test_restarts_after_crashes_keep_everything_acknowledged() -> None:
    host = InMemoryHost()
    for round_ in range(3):
        bookie = host.bookie()
        await bookie.start()
        await add_all(bookie, [add_op(12, round_ * 10 + e) for e in range(10)])
        bookie.abandon()
    async with host.bookie() as reopened:
        assert await reopened.list_entries(12) == [(0, 29)]


async def test_a_deleted_ledger_stays_deleted_after_a_crash() -> None:
    host = InMemoryHost()
    bookie = host.bookie()
    await bookie.start()
    await add_all(bookie, [add_op(13, 0), add_op(14, 0)])
    await bookie.delete_ledgers([13])
    assert await bookie.local_ledger_ids() == {14}
    bookie.abandon()
    async with host.bookie() as reopened:
        assert await reopened.local_ledger_ids() == {14}
        assert await status_of(reopened.read_entry(13, 0)) == bookie_pb2.ENOLEDGER


async def test_a_long_journal_is_checkpointed_so_the_disk_stays_bounded() -> None:
    gate = GatedSync()
    host = InMemoryHost(sync=gate, checkpoint_bytes=4096)
    bookie = host.bookie()
    await bookie.start()
    gate.hold()
    pending = [asyncio.create_task(bookie.add_entries([add_op(15, e)])) for e in range(40)]
    await settle()
    assert len(host.disk.journal) <= 4096  # 40 entries of ~300 bytes: checkpointed on the way
    host.storage(bookie).crash()
    gate.release()
    await asyncio.gather(*pending)
    async with host.bookie() as reopened:  # what the checkpoints took survives unsynced
        found = await _entries(reopened, 15)
        assert len(found) >= 40 - 4096 // len(body(15, 0)) and found == list(range(len(found)))


async def test_an_explicit_lac_wakes_long_polls_before_it_is_durable() -> None:
    """As a piggybacked LAC: the writer saw the entries acknowledged, so the LAC is true whether
    or not the WriteLac record survives; a tailing reader need not wait for the journal."""
    gate = GatedSync()
    host = InMemoryHost(sync=gate)
    bookie = host.bookie()
    await bookie.start()
    try:
        await add_all(bookie, [add_op(3, 0, -1), add_op(3, 1, -1)])
        waiter = asyncio.create_task(bookie.wait_for_lac(3, -1, 30.0))
        gate.hold()
        write = asyncio.create_task(bookie.write_lac(3, 1, KEY, lac_body(3, 1)))
        await settle()
        assert waiter.done() and waiter.result() == 1
        assert not write.done()  # still waiting for its sync
        gate.release()
        await write
    finally:
        gate.release()
        await bookie.close()
