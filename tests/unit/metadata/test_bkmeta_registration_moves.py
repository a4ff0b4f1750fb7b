"""A bookie's registration moving between ``available/`` and ``available/readonly/`` when
ZooKeeper fails half-way: the caller (the bookie's state manager) retries, and the retry must
finish the move. ZooKeeper is the in-memory one (``bkmeta.memory_store``) with injected
connection losses; the real one is in tests/integration/test_metadata_cluster.py."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.clock import ManualClock
from tests.support.memory_zk import READONLY, WRITABLE, bookie_znodes, settle, zookeeper_with_faults

from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.registration import BookieIdInUseError, BookieRegistration, BookieServiceInfo
from bkproto.errors import MetadataStoreError


@pytest.mark.parametrize("failing", ["create", "delete"])
async def test_a_move_that_failed_half_way_is_finished_by_the_retry(failing: str) -> None:
    server, faults = zookeeper_with_faults()
    registration = BookieRegistration(server.session(), BookieServiceInfo.for_address("h", 1))
    await registration.register()
    assert bookie_znodes(server) == {WRITABLE}
    faults.fail_next[failing] = 1
    with pytest.raises(MetadataStoreError):
        await registration.set_read_only(True)
    assert not registration.read_only  # not moved yet, as far as the caller can tell
    await registration.set_read_only(True)  # the retry
    assert bookie_znodes(server) == {READONLY} and registration.read_only
    await registration.set_read_only(True)  # and once more: nothing to do
    assert bookie_znodes(server) == {READONLY}
    await registration.set_read_only(False)
    assert bookie_znodes(server) == {WRITABLE}
    await registration.close()
    assert not bookie_znodes(server)


async def test_re_registering_after_a_session_expiry_keeps_a_move_in_flight() -> None:
    server, faults = zookeeper_with_faults()
    session = server.session()
    registration = BookieRegistration(session, BookieServiceInfo.for_address("h", 1))
    await registration.register()
    faults.gate = asyncio.Event()
    moving = asyncio.create_task(registration.set_read_only(True))  # waits in its create
    await settle()
    session.expire()  # meanwhile: the writable ephemeral goes, a new session comes up
    await settle()
    assert not bookie_znodes(server)
    faults.gate.set()
    await moving
    await settle()  # the re-registration after the move
    assert bookie_znodes(server) == {READONLY} and registration.read_only
    assert server.ephemerals() == [READONLY]
    await registration.close()


async def test_waiting_for_a_stale_registration_is_measured_on_the_clock() -> None:
    """A registration held by another live session is waited out until the deadline on the
    registration's clock (30 s here, which this clock passes at its second reading)."""
    server = MemoryZooKeeper()
    holder = server.session()
    await holder.create(WRITABLE, ephemeral=True, makepath=True)
    clock = ManualClock(step_s=31.0)
    info = BookieServiceInfo.for_address("h", 1)
    registration = BookieRegistration(server.session(), info, stale_wait_s=30.0, clock=clock)
    with pytest.raises(BookieIdInUseError, match="held by another ZooKeeper session"):
        await registration.register()
    assert server.ephemerals() == [WRITABLE] and server.ephemerals(holder.session_id) == [WRITABLE]
