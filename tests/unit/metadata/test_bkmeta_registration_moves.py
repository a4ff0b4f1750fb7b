"""A bookie's registration moving between ``available/`` and ``available/readonly/`` when
ZooKeeper fails half-way: the caller (the bookie's state manager) retries, and the retry must
finish the move. ZooKeeper is a fake behind ``bkmeta.zk.ZkClient``'s methods the registration
uses; the real one is in tests/integration/test_metadata_cluster.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bkmeta.registration import BookieRegistration, BookieServiceInfo
from bkmeta.zk import ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import MetadataStoreError

WRITABLE = "/ledgers/available/h:1"
READONLY = "/ledgers/available/readonly/h:1"


class FakeZk:
    session_id = 7
    connected = True
    config = SimpleNamespace(session_timeout_s=1.0)

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.fail_next: dict[str, int] = {}  # operation -> failures to come

    def _maybe_fail(self, operation: str) -> None:
        if self.fail_next.get(operation):
            self.fail_next[operation] -= 1
            raise MetadataStoreError(f"connection loss during {operation}")

    async def create(self, path: str, data: bytes, ephemeral: bool = False, makepath: bool = False) -> str:
        self._maybe_fail("create")
        if path in self.nodes:
            raise ZkNodeExistsError(path)
        self.nodes[path] = data
        return path

    async def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        if path not in self.nodes:
            raise ZkNoNodeError(path)
        return self.nodes[path], SimpleNamespace(ephemeralOwner=self.session_id, version=0)

    async def delete(self, path: str, version: int = -1) -> None:
        self._maybe_fail("delete")
        if path not in self.nodes:
            raise ZkNoNodeError(path)
        del self.nodes[path]

    def add_session_listener(self, listener: Any) -> None:
        pass

    def remove_session_listener(self, listener: Any) -> None:
        pass


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
