"""Id generator scheme switches (short -> long, HOB rollover) over the in-memory ZooKeeper, its
sequence counters started near overflow (real-ZooKeeper behaviour is in the integration tests)."""

from __future__ import annotations

from tests.support.memory_zk import settle

from bkmeta.idgen import LedgerIdGenerator
from bkmeta.layout import INT_MAX, ZkLayout
from bkmeta.memory_store import MemoryZooKeeper


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
