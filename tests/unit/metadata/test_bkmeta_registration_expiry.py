"""A bookie's re-registration after its ZooKeeper session expired, when ZooKeeper fails during
it: the registration must come back once ZooKeeper answers again. ZooKeeper is the in-memory one
(``bkmeta.memory_store``) with injected faults; the simulation's regression test of seed 2581
(tests/unit/test_simulation.py) runs the same over its network."""

from __future__ import annotations

import asyncio

from tests.support.memory_zk import WRITABLE, settle, zookeeper_with_faults

from bkmeta.registration import BookieRegistration, BookieServiceInfo, BookieWatcher


async def test_a_re_registration_cut_off_in_flight_is_retried_once_reconnected() -> None:
    """Seed 2581: the create is on the way when the connection drops, and the connection comes
    back before the session expires, so no new session (and no new re-registration) follows."""
    server, faults = zookeeper_with_faults()
    session = server.session()
    registration = BookieRegistration(session, BookieServiceInfo.for_address("h", 1))
    await registration.register()
    faults.gate = asyncio.Event()
    session.expire()  # the ephemeral goes; the re-registration's create waits at the gate
    await settle()
    renewed_id = session.session_id
    session.disconnect()
    faults.gate.set()  # the create arrives without a connection: connection loss
    await settle()
    assert server.ephemerals() == []
    session.reconnect()
    await settle()
    assert session.session_id == renewed_id  # the same session: it did not expire meanwhile
    assert server.ephemerals(renewed_id) == [WRITABLE]
    await registration.close()
    assert server.ephemerals() == []


async def test_a_re_registration_that_failed_while_connected_is_retried() -> None:
    server, faults = zookeeper_with_faults()
    session = server.session()
    registration = BookieRegistration(session, BookieServiceInfo.for_address("h", 1))
    await registration.register()
    watcher = BookieWatcher(server.session())
    await watcher.start()
    faults.fail_next["create"] = 1
    session.expire()  # the re-registration's create fails; the connection stays up
    await watcher.wait_for(lambda w: "h:1" not in w.writable_bookies(), timeout_s=10.0)
    await watcher.wait_for(lambda w: "h:1" in w.writable_bookies(), timeout_s=10.0)
    assert server.ephemerals() == [WRITABLE] and server.ephemerals(session.session_id) == [WRITABLE]
    await registration.close()
    await watcher.close()
