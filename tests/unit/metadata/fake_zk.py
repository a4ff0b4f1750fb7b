"""A fake ZooKeeper behind the methods of ``bkmeta.zk.ZkClient`` that a bookie's registration
uses, with failures and a gate to inject. Unit tests only: the real one is in the integration
tests."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from bkmeta.zk import ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import MetadataStoreError

# where the registration of bookie "h:1" lives
WRITABLE = "/ledgers/available/h:1"
READONLY = "/ledgers/available/readonly/h:1"


class FakeZk:
    session_id = 7
    connected = True
    config = SimpleNamespace(session_timeout_s=1.0)

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.fail_next: dict[str, int] = {}  # operation -> failures to come
        self.gate: asyncio.Event | None = None  # when set up, creates wait for it

    def _maybe_fail(self, operation: str) -> None:
        if self.fail_next.get(operation):
            self.fail_next[operation] -= 1
            raise MetadataStoreError(f"connection loss during {operation}")

    async def create(self, path: str, data: bytes, ephemeral: bool = False, makepath: bool = False) -> str:
        if self.gate is not None:
            await self.gate.wait()
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

    async def delete_own_ephemeral(self, path: str) -> bool:
        """Every node here is this session's: like ``ZkClient``, a get then a delete."""
        try:
            await self.get(path)
            await self.delete(path)
        except ZkNoNodeError:
            return False
        return True

    def add_session_listener(self, listener: Any) -> None:
        pass

    def remove_session_listener(self, listener: Any) -> None:
        pass
