"""Helpers for unit tests over :mod:`bkmeta.memory_store` (the in-memory ZooKeeper).

``OpFaults`` is a ``before_op`` hook: it fails chosen operations the way a connection loss
does (before they reach the server, so nothing applied) and can hold every create at a gate.
``settle()`` lets the store's background work (watch deliveries, ``delete_nowait``) run.
``open_metadata()`` is an open ledger's metadata for the ledger manager's tests."""

from __future__ import annotations

import asyncio

from bkmeta.memory_store import MemoryZooKeeper
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkproto.errors import MetadataStoreError

E3 = ("a:1", "b:2", "c:3")


def open_metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, state=LedgerState.OPEN,
        last_entry_id=-1, length=0, digest_type=DigestType.CRC32C, password=b"pw", ctime=1,
        segments=(Segment(0, E3),),
    )


# where the registration of bookie "h:1" lives
WRITABLE = "/ledgers/available/h:1"
READONLY = "/ledgers/available/readonly/h:1"


class OpFaults:
    def __init__(self) -> None:
        self.fail_next: dict[str, int] = {}  # operation -> failures to come
        self.gate: asyncio.Event | None = None  # when set up, creates wait for it
        self.ops: list[tuple[int, str, str]] = []  # (session id, op, path), in order

    async def __call__(self, session_id: int, op: str, path: str) -> None:
        self.ops.append((session_id, op, path))
        if op == "create" and self.gate is not None:
            await self.gate.wait()
        else:
            await asyncio.sleep(0)
        if self.fail_next.get(op):
            self.fail_next[op] -= 1
            raise MetadataStoreError(f"connection loss during {op} {path}")


def zookeeper_with_faults() -> tuple[MemoryZooKeeper, OpFaults]:
    faults = OpFaults()
    return MemoryZooKeeper(before_op=faults), faults


def bookie_znodes(server: MemoryZooKeeper) -> set[str]:
    """The registration znodes of bookie "h:1" that exist."""
    return {p for p in server.paths() if p in (WRITABLE, READONLY)}


async def settle(rounds: int = 20) -> None:
    """Give the event loop ``rounds`` turns (the in-memory store needs no time, only turns)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
