"""Id generator scheme switches (short -> long, HOB rollover) over the in-memory ZooKeeper, its
sequence counters started near overflow (real-ZooKeeper behaviour is in the integration tests)."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.memory_zk import settle

from bkmeta.idgen import LedgerIdGenerator
from bkmeta.layout import INT_MAX, ZkLayout
from bkmeta.memory_store import MemoryZooKeeper
from bkproto.errors import MetadataStoreError


async def test_short_ids_then_switch_to_long_at_int_max() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    await zk.ensure_path("/ledgers/idgen")
    server.set_sequence("/ledgers/idgen", INT_MAX - 2)
    gen = LedgerIdGenerator(zk, ZkLayout())
    assert await gen.generate() == INT_MAX - 2
    assert await gen.generate() == INT_MAX - 1
    # The short counter reaches Integer.MAX_VALUE: ids move to HOB 1 of the long scheme.
    assert await gen.generate() == (1 << 32) | 0
    assert await gen.generate() == (1 << 32) | 1
    assert "/ledgers/idgen-long/HOB-0000000001" in server.paths()
    # Every ID- node is deleted once its number is taken.
    await settle()
    assert not [n for n in server.paths() if "/ID-" in n]
    # A new generator (another client) sees idgen-long and never goes back to short ids.
    other = LedgerIdGenerator(server.session(), ZkLayout())
    assert await other.generate() == (1 << 32) | 2


async def test_hob_rollover_when_low_counter_is_used_up() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    await zk.ensure_path("/ledgers/idgen-long/HOB-0000000007")
    await zk.ensure_path("/ledgers/idgen-long/HOB-0000000003")
    server.set_sequence("/ledgers/idgen-long/HOB-0000000007", INT_MAX - 1)
    gen = LedgerIdGenerator(zk, ZkLayout())
    assert await gen.generate() == (7 << 32) | (INT_MAX - 1)  # the highest HOB is used
    assert await gen.generate() == (8 << 32) | 0  # its counter ran out: next HOB
    assert await gen.generate() == (8 << 32) | 1


async def test_ids_are_unique_across_clients_and_the_short_counter_skips_nothing() -> None:
    server = MemoryZooKeeper()
    first = LedgerIdGenerator(server.session(), ZkLayout())
    second = LedgerIdGenerator(server.session(), ZkLayout())
    ids = [await gen.generate() for _ in range(3) for gen in (first, second)]
    assert ids == list(range(6))  # ZooKeeper numbers creates, not live children


async def test_concurrent_callers_get_distinct_ids_and_leave_no_id_nodes() -> None:
    server = MemoryZooKeeper()
    gen = LedgerIdGenerator(server.session(), ZkLayout())
    bookkeeper_like = server.session()  # a client creating one ID- node per id, as Java's does
    await bookkeeper_like.ensure_path("/ledgers/idgen")

    async def single_id() -> int:
        path = await bookkeeper_like.create("/ledgers/idgen/ID-", b"", ephemeral=True, sequence=True)
        await bookkeeper_like.delete(path)
        return int(path.rsplit("-", 1)[1])

    ours = await asyncio.gather(*(gen.generate() for _ in range(50)), *(single_id() for _ in range(5)))
    ours += await asyncio.gather(*(gen.generate() for _ in range(20)))
    assert len(set(ours)) == len(ours) == 75
    await settle()
    assert not [n for n in server.paths() if "/ID-" in n]


async def test_callers_of_a_failed_allocation_all_hear_it_and_later_calls_are_served() -> None:
    server = MemoryZooKeeper()
    zk = server.session()
    gen = LedgerIdGenerator(zk, ZkLayout())
    assert await gen.generate() == 0
    await zk.close()
    results = await asyncio.gather(*(gen.generate() for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, MetadataStoreError) for r in results)
    # A later call gets its own answer (here the same error) rather than waiting forever.
    with pytest.raises(MetadataStoreError):
        await asyncio.wait_for(gen.generate(), 5)
