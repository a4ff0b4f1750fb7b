"""Shared helpers for the storage and bookie-core unit tests (real files under tmp_path, or the
simulation's in-memory storage)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from bkproto.entry_format import HEADER, LAC_HEADER
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp
from bookie.bookie import Bookie
from bookie.errors import BookieError
from bookie.on_disk import bookie_on_disk
from bookie.storage.config import StorageConfig
from bookie.storage.memory import MemoryDisk, MemoryLedgerStorage, SyncHook

KEY = bytes(range(20))
OTHER_KEY = bytes(range(1, 21))


def make_config(tmp_path: Path, **overrides: Any) -> StorageConfig:
    settings: dict[str, Any] = {
        "journal_dirs": [tmp_path / "journal"],
        "ledger_dirs": [tmp_path / "ledgers"],
        "write_cache_max_size_mb": 4,
        "read_ahead_cache_max_size_mb": 1,
        "journal_pre_alloc_size_mb": 1,
        "flush_interval_ms": 60_000,  # tests checkpoint explicitly
    }
    settings.update(overrides)
    return StorageConfig(**settings)


def make_bookie(config: StorageConfig, **kwargs: Any) -> Bookie:
    """A bookie over a DbLedgerStorage in ``config``'s directories (``bookie.storage``)."""
    return bookie_on_disk(config, CollectorRegistry(), **kwargs)


class BookieHost(Protocol):
    """Where a bookie's durable state lives across restarts: each :meth:`bookie` is a new
    process over the same state (what the last one made durable)."""

    def bookie(self, max_lac_waiters: int = 10_000) -> Bookie: ...


@dataclass
class OnDiskHost:
    config: StorageConfig

    def bookie(self, max_lac_waiters: int = 10_000) -> Bookie:
        return make_bookie(dataclasses.replace(self.config, max_lac_waiters=max_lac_waiters))


@dataclass
class InMemoryHost:
    disk: MemoryDisk = field(default_factory=MemoryDisk)
    sync: SyncHook | None = None
    checkpoint_bytes: int = 16 * 1024 * 1024

    def bookie(self, max_lac_waiters: int = 10_000) -> Bookie:
        storage = MemoryLedgerStorage(self.disk, sync=self.sync, checkpoint_bytes=self.checkpoint_bytes)
        return Bookie(storage, max_lac_waiters=max_lac_waiters)

    def storage(self, bookie: Bookie) -> MemoryLedgerStorage:
        assert isinstance(bookie.storage, MemoryLedgerStorage)
        return bookie.storage


class GatedSync:
    """A MemoryLedgerStorage sync hook the test controls: while held, each sync waits until
    :meth:`release`; :attr:`synced` has the bytes of each sync; a set :attr:`failure` is raised
    by the next syncs (a failing disk)."""

    def __init__(self) -> None:
        self.synced: list[int] = []
        self.failure: Exception | None = None
        self._open = asyncio.Event()
        self._open.set()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def __call__(self, nbytes: int) -> None:
        self.synced.append(nbytes)
        await self._open.wait()
        if self.failure is not None:
            raise self.failure


async def status_of(call: Awaitable[object]) -> int:
    """The BookKeeper status a core call ends with (EOK, or its BookieError's)."""
    try:
        await call
    except BookieError as exc:
        return exc.status
    return bookie_pb2.EOK


async def settle() -> None:
    """Let every ready task run until it waits for something (in-memory storage: no I/O)."""
    for _ in range(20):
        await asyncio.sleep(0)


def body(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes | None = None) -> bytes:
    if payload is None:
        payload = f"payload {ledger_id}/{entry_id} ".encode() * 8
    return HEADER.pack(ledger_id, entry_id, lac, len(payload)) + payload


def add_op(ledger_id: int, entry_id: int, lac: int = -1, key: bytes = KEY, recovery: bool = False,
           payload: bytes | None = None) -> AddOp:
    return AddOp(ledger_id, entry_id, key, body(ledger_id, entry_id, lac, payload), recovery)


def lac_body(ledger_id: int, lac: int) -> bytes:
    return LAC_HEADER.pack(ledger_id, lac) + b"digest"


async def add_all(bookie: Bookie, ops: list[AddOp]) -> None:
    results = await bookie.add_entries(ops)
    assert [r.status for r in results] == [0] * len(ops), results
