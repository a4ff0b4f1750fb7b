"""A bookie's registration moving between ``available/`` and ``available/readonly/`` when
ZooKeeper fails half-way: the caller (the bookie's state manager) retries, and the retry must
finish the move. ZooKeeper is a fake behind ``bkmeta.zk.ZkClient``'s methods the registration
uses; the real one is in tests/integration/test_metadata_cluster.py."""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.metadata.fake_zk import READONLY, WRITABLE, FakeZk

from bkmeta.registration import BookieRegistration, BookieServiceInfo
from bkmeta.zk import SessionEvent
from bkproto.errors import MetadataStoreError


@pytest.mark.parametrize("failing", ["create", "delete"])
async def test_a_move_that_failed_half_way_is_finished_by_the_retry(failing: str) -> None:
    zk = FakeZk()
    registration = BookieRegistration(zk, BookieServiceInfo.for_address("h", 1))  # type: ignore[arg-type]
    await registration.register()
    assert set(zk.nodes) == {WRITABLE}
    zk.fail_next[failing] = 1
    with pytest.raises(MetadataStoreError):
        await registration.set_read_only(True)
    assert not registration.read_only  # not moved yet, as far as the caller can tell
    await registration.set_read_only(True)  # the retry
    assert set(zk.nodes) == {READONLY} and registration.read_only
    await registration.set_read_only(True)  # and once more: nothing to do
    assert set(zk.nodes) == {READONLY}
    await registration.set_read_only(False)
    assert set(zk.nodes) == {WRITABLE}
    await registration.close()
    assert not zk.nodes


async def test_re_registering_after_a_session_expiry_keeps_a_move_in_flight() -> None:
    zk = FakeZk()
    registration = BookieRegistration(zk, BookieServiceInfo.for_address("h", 1))  # type: ignore[arg-type]
    await registration.register()
    zk.gate = asyncio.Event()
    moving = asyncio.create_task(registration.set_read_only(True))  # waits in its create
    await asyncio.sleep(0.05)
    registration._on_session_event(SessionEvent.NEW_SESSION)  # the session expired meanwhile
    await asyncio.sleep(0.05)
    zk.gate.set()
    await moving
    for _ in range(20):  # let the re-registration run after the move
        await asyncio.sleep(0.01)
    assert set(zk.nodes) == {READONLY} and registration.read_only
    await registration.close()
