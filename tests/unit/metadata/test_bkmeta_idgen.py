"""Id generator scheme switches (short -> long, HOB rollover), with an in-memory ZooKeeper fake
standing in for :class:`bkmeta.zk.ZkClient` (real-ZooKeeper behaviour is in the integration tests)."""

from __future__ import annotations

from typing import Any

from bkmeta.idgen import LedgerIdGenerator
from bkmeta.layout import INT_MAX, ZkLayout
from bkmeta.zk import ZkNodeExistsError, ZkNoNodeError


class FakeZk:
    """Just the ZkClient calls the id generator makes, with per-parent sequence counters."""

    def __init__(self, counters: dict[str, int] | None = None) -> None:
        self.nodes: set[str] = {"/ledgers", "/ledgers/idgen"}
        self.counters = counters or {}
        self.deleted: list[str] = []

    async def exists(self, path: str) -> Any:
        return object() if path in self.nodes else None

    async def get_children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise ZkNoNodeError(path)
        return [n.rsplit("/", 1)[1] for n in self.nodes if n.rsplit("/", 1)[0] == path]

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        parent = path.rsplit("/", 1)[0]
        if parent not in self.nodes:
            if not makepath:
                raise ZkNoNodeError(parent)
            await self.ensure_path(parent)
        if sequence:
            seq = self.counters.get(parent, 0)
            self.counters[parent] = seq + 1
            path = f"{path}{seq:010d}"
        if path in self.nodes:
            raise ZkNodeExistsError(path)
        self.nodes.add(path)
        return path

    async def ensure_path(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.nodes.add("/" + "/".join(parts[:i]))

    def delete_nowait(self, path: str) -> None:
        self.nodes.discard(path)
        self.deleted.append(path)


async def test_short_ids_then_switch_to_long_at_int_max() -> None:
    zk = FakeZk({"/ledgers/idgen": INT_MAX - 2})
    gen = LedgerIdGenerator(zk, ZkLayout())  # type: ignore[arg-type]
    assert await gen.generate() == INT_MAX - 2
    assert await gen.generate() == INT_MAX - 1
    # The short counter reaches Integer.MAX_VALUE: ids move to HOB 1 of the long scheme.
    assert await gen.generate() == (1 << 32) | 0
    assert await gen.generate() == (1 << 32) | 1
    assert "/ledgers/idgen-long/HOB-0000000001" in zk.nodes
    # Every ID- node is deleted once its number is taken.
    assert not [n for n in zk.nodes if "/ID-" in n]
    # A new generator (another client) sees idgen-long and never goes back to short ids.
    other = LedgerIdGenerator(zk, ZkLayout())  # type: ignore[arg-type]
    assert await other.generate() == (1 << 32) | 2


async def test_hob_rollover_when_low_counter_is_used_up() -> None:
    zk = FakeZk({"/ledgers/idgen-long/HOB-0000000007": INT_MAX - 1})
    await zk.ensure_path("/ledgers/idgen-long/HOB-0000000007")
    await zk.ensure_path("/ledgers/idgen-long/HOB-0000000003")
    gen = LedgerIdGenerator(zk, ZkLayout())  # type: ignore[arg-type]
    assert await gen.generate() == (7 << 32) | (INT_MAX - 1)  # the highest HOB is used
    assert await gen.generate() == (8 << 32) | 0  # its counter ran out: next HOB
    assert await gen.generate() == (8 << 32) | 1
