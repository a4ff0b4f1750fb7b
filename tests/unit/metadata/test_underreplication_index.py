"""The under-replication index over the in-memory ZooKeeper: marks merge and keep their ctime, one
session at a time holds a ledger's lock (and loses it with its session), and a worker clears a
mark only at the version it read."""

from __future__ import annotations

from bkmeta.layout import ZkLayout
from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.underreplication import UnderreplicationIndex


async def test_marks_merge_their_replicas_and_keep_their_first_ctime() -> None:
    server = MemoryZooKeeper()
    index = UnderreplicationIndex(server.session(), ZkLayout())
    assert await index.mark(7, frozenset({"a:1"}))
    first = await index.get(7)
    assert first is not None
    assert not await index.mark(7, frozenset({"a:1"}))  # nothing new
    assert await index.mark(7, frozenset({"b:2"}))
    merged = await index.get(7)
    assert merged is not None and merged.replicas == {"a:1", "b:2"} and merged.ctime_ms == first.ctime_ms
    await index.mark(2**40 + 3, frozenset({"c:3"}))
    assert await index.ledger_ids() == [7, 2**40 + 3]


async def test_one_lock_holder_at_a_time_and_a_dead_sessions_lock_goes_with_it() -> None:
    server = MemoryZooKeeper()
    first, second = server.session(), server.session()
    a, b = UnderreplicationIndex(first, ZkLayout(), "a"), UnderreplicationIndex(second, ZkLayout(), "b")
    await a.mark(7, frozenset({"x:1"}))
    assert await a.try_lock(7)
    assert not await b.try_lock(7)
    assert await b.lock_holder(7) == "a"
    await b.release(7)  # not b's: stays
    assert await b.lock_holder(7) == "a"
    first.expire()
    assert await b.try_lock(7)


async def test_a_mark_extended_during_the_repair_survives_it() -> None:
    session = MemoryZooKeeper().session()
    index = UnderreplicationIndex(session, ZkLayout())
    await index.mark(7, frozenset({"a:1"}))
    read = await index.get(7)
    assert read is not None
    await index.mark(7, frozenset({"b:2"}))  # the auditor, while a worker repairs a:1
    assert not await index.mark_replicated(read)
    again = await index.get(7)
    assert again is not None and await index.mark_replicated(again)
    assert await index.ledger_ids() == []
    assert await session.get_children(index.ledgers_path) == []  # its empty directories pruned
