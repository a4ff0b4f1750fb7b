"""An aborted write against a task that registers its ledger late (issue 30), over the in-memory
ZooKeeper: whichever comes first, the task's registration or the abort's sweep, the ledger ends
up claimed (no longer pending, for its deleter) and the write never commits. Then the markers'
garbage collection, and logs made before markers existed."""

from __future__ import annotations

import re

import pytest

from bkmeta.log_gc import find_stale_markers, remove_stale_markers
from bkmeta.memory_store import MemorySession, MemoryZooKeeper
from bkmeta.named_log import LogSegment, LogStore, check_write_id
from bkproto.errors import IllegalOpError, IncorrectParameterError

LOG = "events"


class Clock:
    """The in-memory ZooKeeper's clock (znode ctimes), moved by the test."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def stores(server: MemoryZooKeeper) -> tuple[LogStore, LogStore]:
    """The driver's and a task's view of the logs, each through its own session."""
    return LogStore(server.session()), LogStore(server.session())


async def test_a_task_registering_after_the_abort_is_refused_and_its_ledger_claimed() -> None:
    driver, task = stores(MemoryZooKeeper())
    await driver.ensure(LOG)
    assert await driver.abort(LOG, "w1") == []  # no task had registered yet
    with pytest.raises(IllegalOpError, match="write 'w1' was aborted; ledger 42 is not kept"):
        await task.register_pending(LOG, 42, "w1")
    assert await driver.pending(LOG) == {}
    # Another write of the same log is untouched by that marker.
    await task.register_pending(LOG, 43, "w2")
    assert set(await driver.pending(LOG)) == {43}


async def test_the_abort_of_a_log_not_made_yet_still_stops_its_first_task() -> None:
    # The job failed before any task opened a ledger: the first late task makes the log.
    driver, task = stores(MemoryZooKeeper())
    assert await driver.abort(LOG, "w1") == []
    await task.ensure(LOG)
    with pytest.raises(IllegalOpError, match="was aborted"):
        await task.register_pending(LOG, 42, "w1")
    assert await driver.pending(LOG) == {}


async def test_a_task_registered_before_the_abort_is_swept_and_the_write_never_commits() -> None:
    driver, task = stores(MemoryZooKeeper())
    await task.ensure(LOG)
    await task.register_pending(LOG, 42, "w1")
    await task.register_pending(LOG, 50, "other")
    assert await driver.abort(LOG, "w1") == [42]  # claimed: the caller deletes the ledger
    assert set(await driver.pending(LOG)) == {50}
    with pytest.raises(IllegalOpError, match="write 'w1' was aborted; nothing was committed"):
        await driver.commit(LOG, "w1", [LogSegment(42, 1, 1, "w1")])
    assert await driver.commits(LOG) == []


async def test_a_commit_of_an_aborted_write_is_refused_even_with_its_ledgers_pending() -> None:
    # Refused by the marker in the commit's own transaction, not by a pending znode found gone:
    # here the write's ledger is still pending (registered by a store that skips no check, then
    # the marker made without a sweep, as an abort whose sweep did not run yet would leave it).
    server = MemoryZooKeeper()
    driver, task = stores(server)
    await task.ensure(LOG)
    await task.register_pending(LOG, 42, "w1")
    await server.session().create(f"{driver.path(LOG)}/aborted/w1", b"")
    with pytest.raises(IllegalOpError, match="was aborted"):
        await driver.commit(LOG, "w1", [LogSegment(42, 1, 1, "w1")])
    with pytest.raises(IllegalOpError, match="was aborted"):
        await driver.commit(LOG, "w1", [])  # a write whose tasks were all empty, too
    assert await driver.commits(LOG) == [] and set(await driver.pending(LOG)) == {42}
    # A write that was not aborted commits as before, and its marker path stays free.
    await task.register_pending(LOG, 43, "w2")
    assert (await driver.commit(LOG, "w2", [LogSegment(43, 1, 1, "w2")])).committed
    assert await driver.aborted_writes(LOG) == {"w1": await _ctime(server, driver, "w1")}


async def _ctime(server: MemoryZooKeeper, store: LogStore, write_id: str) -> int:
    _, stat = await server.session().get(f"{store.path(LOG)}/aborted/{write_id}")
    return stat.ctime


async def test_an_abort_between_a_tasks_registration_and_its_check_is_seen_by_both() -> None:
    """The interleaving of the CI failure, made exact: the abort runs after the task's pending
    znode exists and before the task looks for the marker. The sweep finds the ledger and the
    task finds the marker; the ledger is claimed once, and the task fails."""
    aborted: list[list[int]] = []

    async def abort_before_the_tasks_check(session_id: int, op: str, path: str) -> None:
        if session_id == task_session.session_id and op == "exists" and "/aborted/" in path and not aborted:
            aborted.append(await driver.abort(LOG, "w1"))

    server = MemoryZooKeeper(before_op=abort_before_the_tasks_check)
    driver = LogStore(server.session())
    task_session: MemorySession = server.session()
    task = LogStore(task_session)
    await task.ensure(LOG)
    with pytest.raises(IllegalOpError, match="was aborted"):
        await task.register_pending(LOG, 42, "w1")
    assert aborted == [[42]]  # the sweep claimed it (the task's own claim found it gone)
    assert await driver.pending(LOG) == {}


async def test_a_log_made_before_abort_markers_gets_them_from_ensure() -> None:
    server = MemoryZooKeeper()
    store = LogStore(server.session())
    await store.ensure(LOG)
    zk = server.session()
    await zk.delete(f"{store.path(LOG)}/aborted")  # the layout an older client made
    await store.ensure(LOG)
    assert await zk.exists(f"{store.path(LOG)}/aborted") is not None
    assert await store.abort(LOG, "w1") == []
    assert await store.is_aborted(LOG, "w1")


async def test_old_markers_go_once_their_write_has_nothing_pending() -> None:
    clock = Clock()
    server = MemoryZooKeeper(now_ms=clock)
    driver, task = stores(server)
    await driver.ensure(LOG)
    await driver.abort(LOG, "old")
    await driver.abort(LOG, "stuck")
    # A task of "stuck" that registered and then died before it looked for the marker.
    await server.session().create(f"{driver.path(LOG)}/pending/42", b"stuck")
    clock.ms += 3_600_000
    await driver.abort(LOG, "young")
    now_s = clock.ms / 1000.0
    found = await find_stale_markers(driver, LOG, min_age_s=1800, now_s=now_s)
    assert [(m.write_id, m.age_s) for m in found] == [("old", 3600.0)]
    assert await remove_stale_markers(driver, LOG, found) == found
    assert set(await driver.aborted_writes(LOG)) == {"stuck", "young"}
    # Once the stuck ledger is collected (its pending znode claimed), its marker can go too.
    assert await task.claim_pending(LOG, 42)
    found = await find_stale_markers(driver, LOG, min_age_s=1800, now_s=now_s)
    assert [m.write_id for m in found] == ["stuck"]
    # Registered again between the finding and the removal: kept, the ledger must meet it.
    await server.session().create(f"{driver.path(LOG)}/pending/43", b"stuck")
    assert await remove_stale_markers(driver, LOG, found) == []
    assert set(await driver.aborted_writes(LOG)) == {"stuck", "young"}
    with pytest.raises(IncorrectParameterError, match="minimum age"):
        await find_stale_markers(driver, LOG, min_age_s=-1)


@pytest.mark.parametrize("write_id", [".", ".."])
def test_write_ids_that_cannot_name_a_marker_are_refused(write_id: str) -> None:
    with pytest.raises(IncorrectParameterError, match=re.escape("not '.' or '..' alone")):
        check_write_id(write_id)
    assert check_write_id("a.b") == "a.b"
