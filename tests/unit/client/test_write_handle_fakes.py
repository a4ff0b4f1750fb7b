"""In-memory stand-ins for the write path's collaborators: bookie connections (BookieClient's add
and unary interface), the ledger manager's read/write CAS and the registration view."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from bkclient.config import ClientConfig
from bkclient.context import ClientContext
from bkclient.digest import DigestManager
from bkclient.placement import RandomPlacement
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkproto.errors import BKError, LedgerExistsError, MetadataVersionError, NoSuchLedgerError
from bkproto.v1 import bookie_pb2

AddCallback = Callable[[BKError | None], None]


@dataclass
class SentAdd:
    ledger_id: int
    entry_id: int
    body: bytes
    callback: AddCallback
    recovery: bool


class FakeBookie:
    """Records adds. ``mode``: "ack" answers on the next loop turn, "hold" keeps them until
    :meth:`ack`/:meth:`fail`, "error" fails them with ``error``."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.mode = "ack"
        self.error: BKError | None = None
        self.adds: list[SentAdd] = []
        self.held: list[SentAdd] = []
        self.lacs: list[tuple[int, bytes]] = []
        self.forced: list[int] = []
        self.closed = False

    def fail_with(self, error: BKError) -> None:
        """Answer every later add with ``error``."""
        self.mode = "error"
        self.error = error

    def add_with_callback(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        callback: AddCallback,
        recovery: bool = False,
    ) -> None:
        add = SentAdd(ledger_id, entry_id, body, callback, recovery)
        self.adds.append(add)
        loop = asyncio.get_running_loop()
        if self.mode == "ack":
            loop.call_soon(callback, None)
        elif self.mode == "error":
            assert self.error is not None
            loop.call_soon(callback, self.error)
        else:
            self.held.append(add)

    def add_encoded(self, encoded: bytes, listener: Any, token: int) -> None:
        add = bookie_pb2.AddEntriesRequest.FromString(encoded).adds[0]
        recovery = bool(add.flags & bookie_pb2.RECOVERY_ADD)

        def callback(error: BKError | None) -> None:
            listener.add_complete(self.bookie_id, token, error)

        self.add_with_callback(add.ledger_id, add.entry_id, add.master_key, add.body, callback, recovery)

    def ack(self, entry_id: int | None = None) -> None:
        for add in list(self.held):
            if entry_id is None or add.entry_id == entry_id:
                self.held.remove(add)
                add.callback(None)

    def fail(self, error: BKError, entry_id: int | None = None) -> None:
        for add in list(self.held):
            if entry_id is None or add.entry_id == entry_id:
                self.held.remove(add)
                add.callback(error)

    def entry_ids(self) -> list[int]:
        return [a.entry_id for a in self.adds]

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes, **_: Any) -> None:
        self.lacs.append((lac, body))

    async def force_ledger(self, ledger_id: int, **_: Any) -> None:
        self.forced.append(ledger_id)


class FakePool:
    def __init__(self) -> None:
        self.bookies: dict[str, FakeBookie] = {}

    def get(self, bookie_id: str) -> FakeBookie:
        if bookie_id not in self.bookies:
            self.bookies[bookie_id] = FakeBookie(bookie_id)
        return self.bookies[bookie_id]

    async def close(self) -> None:
        pass


class FakeLedgerManager:
    """CAS by version, like ZooKeeper's setData."""

    def __init__(self) -> None:
        self.ledgers: dict[int, Versioned[LedgerMetadata]] = {}
        self.writes = 0
        self.next_id = 1

    async def create_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata
    ) -> Versioned[LedgerMetadata]:
        if ledger_id in self.ledgers:
            raise LedgerExistsError(str(ledger_id))
        versioned = Versioned(metadata, 0)
        self.ledgers[ledger_id] = versioned
        return versioned

    async def generate_ledger_id(self) -> int:
        self.next_id += 1
        return self.next_id

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        if ledger_id not in self.ledgers:
            raise NoSuchLedgerError(str(ledger_id))
        return self.ledgers[ledger_id]

    async def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> Versioned[LedgerMetadata]:
        current = self.ledgers[ledger_id]
        if current.version != version:
            raise MetadataVersionError(f"version {version} != {current.version}")
        self.writes += 1
        updated = Versioned(metadata, version + 1)
        self.ledgers[ledger_id] = updated
        return updated

    async def remove_ledger_metadata(self, ledger_id: int, version: int = -1) -> None:
        if self.ledgers.pop(ledger_id, None) is None:
            raise NoSuchLedgerError(str(ledger_id))

    async def list_ledgers(self) -> list[int]:
        return sorted(self.ledgers)

    def force(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        """Another client's change (bumps the version)."""
        current = self.ledgers[ledger_id]
        self.ledgers[ledger_id] = Versioned(metadata, current.version + 1)


@dataclass
class FakeWatcher:
    bookies: list[str] = field(default_factory=list)

    def writable_bookies(self) -> dict[str, Any]:
        return {b: SimpleNamespace(bookie_id=b, host="127.0.0.1", port=1, rack=None) for b in self.bookies}

    def readonly_bookies(self) -> dict[str, Any]:
        return {}

    def all_bookies(self) -> dict[str, Any]:
        return self.writable_bookies()


@dataclass
class WriteWorld:
    ctx: ClientContext
    pool: FakePool
    lm: FakeLedgerManager
    watcher: FakeWatcher

    def bookie(self, bookie_id: str) -> FakeBookie:
        return self.pool.get(bookie_id)


def make_world(bookies: int = 4, **config: Any) -> WriteWorld:
    pool = FakePool()
    lm = FakeLedgerManager()
    watcher = FakeWatcher([f"b{i}" for i in range(bookies)])
    metadata = SimpleNamespace(ledger_manager=lm, bookie_watcher=watcher)
    ctx = ClientContext(
        metadata,  # type: ignore[arg-type]
        pool,  # type: ignore[arg-type]
        ClientConfig(**config),
        RandomPlacement(),
    )
    return WriteWorld(ctx, pool, lm, watcher)


def new_ledger(
    world: WriteWorld,
    ensemble: tuple[str, ...] = ("b0", "b1", "b2"),
    qw: int = 2,
    qa: int = 2,
    ledger_id: int = 7,
) -> tuple[int, Versioned[LedgerMetadata], DigestManager]:
    md = LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum_size=qw,
        ack_quorum_size=qa,
        state=LedgerState.OPEN,
        last_entry_id=-1,
        length=0,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        ctime=int(time.time() * 1000),
        segments=(Segment(0, ensemble),),
    )
    versioned = Versioned(md, 0)
    world.lm.ledgers[ledger_id] = versioned
    return ledger_id, versioned, DigestManager(ledger_id, b"pw", DigestType.CRC32C)


def gate_metadata_writes(world: WriteWorld) -> asyncio.Event:
    """Metadata writes wait until the returned event is set (an ensemble change in progress)."""
    gate = asyncio.Event()
    original_write = world.lm.write_ledger_metadata

    async def slow_write(*args: object) -> object:
        await gate.wait()
        return await original_write(*args)  # type: ignore[arg-type]

    world.lm.write_ledger_metadata = slow_write  # type: ignore[method-assign]
    return gate
