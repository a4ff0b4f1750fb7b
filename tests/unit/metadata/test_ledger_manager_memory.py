"""``ZkLedgerManager`` unchanged over the in-memory ZooKeeper: CAS, watches (also across a
session expiry), iteration; and ``MetadataUpdateLoop`` over it when writers race."""

from __future__ import annotations

import pytest
from tests.support.memory_zk import open_metadata, settle

from bkmeta.ledger_manager import ZkLedgerManager
from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkmeta.update_loop import MetadataUpdateLoop
from bkproto.errors import LedgerExistsError, MetadataVersionError, NoSuchLedgerError


async def test_create_read_cas_delete() -> None:
    lm = ZkLedgerManager(MemoryZooKeeper().session())
    ledger_id, created = await lm.create_ledger(open_metadata())
    assert created.version == 0
    with pytest.raises(LedgerExistsError):
        await lm.create_ledger_metadata(ledger_id, open_metadata())
    closed = open_metadata().with_closed(-1, 0)
    written = await lm.write_ledger_metadata(ledger_id, closed, 0)
    assert written.version == 1 and (await lm.read_ledger_metadata(ledger_id)) == written
    with pytest.raises(MetadataVersionError):
        await lm.write_ledger_metadata(ledger_id, closed, 0)
    await lm.remove_ledger_metadata(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await lm.read_ledger_metadata(ledger_id)


async def test_ids_span_both_layouts_in_order() -> None:
    lm = ZkLedgerManager(MemoryZooKeeper().session())
    ids = [5, 1, 2**31 + 7, 10**6, 2**40]
    for ledger_id in ids:
        await lm.create_ledger_metadata(ledger_id, open_metadata())
    assert await lm.list_ledgers() == sorted(ids)


async def test_a_watch_sees_changes_and_is_re_armed_after_the_session_expires() -> None:
    server = MemoryZooKeeper()
    session = server.session()
    lm, writer = ZkLedgerManager(session), ZkLedgerManager(server.session())
    ledger_id, _ = await writer.create_ledger(open_metadata())
    seen: list[Versioned[LedgerMetadata] | None] = []
    lm.watch_ledger(ledger_id, seen.append)
    await settle()
    assert [v.version for v in seen if v] == [0]  # the current value first
    await writer.write_ledger_metadata(ledger_id, open_metadata().with_state(LedgerState.IN_RECOVERY), 0)
    await settle()
    assert [v.version for v in seen if v] == [0, 1]
    session.expire()  # watches die with the session; the manager re-arms on NEW_SESSION
    await settle()
    await writer.write_ledger_metadata(ledger_id, open_metadata().with_closed(-1, 0), 1)
    await settle()
    assert [v.version for v in seen if v][-1] == 2
    await writer.remove_ledger_metadata(ledger_id)
    await settle()
    assert seen[-1] is None
    await lm.close()


async def test_update_loop_retries_a_conflict_over_the_other_writers_result() -> None:
    server = MemoryZooKeeper()
    lm, other = ZkLedgerManager(server.session()), ZkLedgerManager(server.session())
    ledger_id, held = await lm.create_ledger(open_metadata())
    # Another client changes the ensemble after our read: our CAS at version 0 must fail once.
    changed = open_metadata().with_ensemble_change(5, ("a:1", "b:2", "d:4"))
    await other.write_ledger_metadata(ledger_id, changed, 0)
    refreshed: list[int] = []
    loop = MetadataUpdateLoop(
        lm, ledger_id,
        needs_transformation=lambda md: md.state == LedgerState.OPEN,
        transform=lambda md: md.with_closed(9, 90),
        current=held,
        on_read=lambda v: refreshed.append(v.version),
    )
    result = await loop.run()
    assert loop.attempts == 2 and refreshed == [1]
    assert result.version == 2
    assert result.value.segments == changed.segments  # built on the other writer's metadata
    assert result.value.last_entry_id == 9


async def test_update_loop_returns_without_writing_when_nothing_is_to_do() -> None:
    lm = ZkLedgerManager(MemoryZooKeeper().session())
    ledger_id, _ = await lm.create_ledger(open_metadata().with_state(LedgerState.IN_RECOVERY))
    loop = MetadataUpdateLoop(
        lm, ledger_id,
        needs_transformation=lambda md: md.state == LedgerState.OPEN,
        transform=lambda md: md.with_state(LedgerState.IN_RECOVERY),
    )
    assert (await loop.run()).version == 0 and loop.attempts == 0


async def test_update_loop_predicate_refusal_stops_it() -> None:
    lm = ZkLedgerManager(MemoryZooKeeper().session())
    ledger_id, held = await lm.create_ledger(open_metadata())
    await lm.write_ledger_metadata(ledger_id, open_metadata().with_closed(-1, 0), 0)

    def must_be_open(md: LedgerMetadata) -> bool:
        if md.state != LedgerState.OPEN:
            raise RuntimeError("closed by another client")
        return True

    loop = MetadataUpdateLoop(lm, ledger_id, must_be_open, lambda md: md, current=held)
    with pytest.raises(RuntimeError, match="closed by another"):
        await loop.run()
    assert loop.attempts == 1


async def test_update_loop_gives_up_after_max_attempts() -> None:
    server = MemoryZooKeeper()
    lm = ZkLedgerManager(server.session())
    ledger_id, _ = await lm.create_ledger(open_metadata())
    path = lm.layout.ledger(ledger_id)

    async def rival_writes_first(session_id: int, op: str, znode: str) -> None:
        if op == "set":  # just before each of our CAS writes, another client's lands
            data, _ = server.get(0, znode, None)
            server.set(znode, data, -1)

    server.before_op = rival_writes_first
    loop = MetadataUpdateLoop(
        lm, ledger_id, lambda md: True, lambda md: md.with_closed(-1, 0), max_attempts=3
    )
    with pytest.raises(MetadataVersionError, match="3 compare-and-set conflicts"):
        await loop.run()
    assert loop.attempts == 3
    assert server.get(0, path, None)[1].version == 3  # only the rival's writes landed
