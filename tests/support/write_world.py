"""In-memory stand-ins for the write path's collaborators: bookies whose add answers a test holds
or fails at will (complete :class:`bkclient.transport.BookieConnection` s, reached through the
client's real connection pool), the ledger manager's read/write CAS and the registration view."""

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
from bkclient.transport import AddListener, BookieAddress, BookieConnectionPool, decode_add
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkproto.errors import (
    BKError,
    ClientClosedError,
    LedgerExistsError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from tests.support.memory_cluster import MemoryBookie

AddCallback = Callable[[BKError | None], None]


@dataclass
class SentAdd:
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    callback: AddCallback
    recovery: bool
    encoded: bytes = b""  # the bytes the client queued (an AddEntriesRequest.adds element)


class FakeBookie(MemoryBookie):
    """A memory bookie whose ``add_encoded`` answers (the write handle's path) follow ``mode``:
    "ack" stores and answers on the next loop turn, "hold" keeps them until :meth:`ack`/:meth:`fail`,
    "error" fails them with ``error``. Every add is recorded in ``adds``; acked ones are readable."""

    def __init__(self, bookie_id: str) -> None:
        super().__init__(bookie_id)
        self.mode = "ack"
        self.error: BKError | None = None
        self.adds: list[SentAdd] = []
        self.held: list[SentAdd] = []

    def fail_with(self, error: BKError) -> None:
        """Answer every later add with ``error``."""
        self.mode = "error"
        self.error = error

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        if self.closed:
            error = ClientClosedError(f"bookie client {self.bookie_id} is closed")
            listener.add_complete(self.bookie_id, token, error)
            return
        add = decode_add(encoded)

        def callback(error: BKError | None) -> None:
            listener.add_complete(self.bookie_id, token, error)

        sent = SentAdd(add.ledger_id, add.entry_id, add.master_key, add.body, callback, add.recovery, encoded)
        self.adds.append(sent)
        loop = asyncio.get_running_loop()
        if self.mode == "ack":
            loop.call_soon(self._acked, sent)
        elif self.mode == "error":
            assert self.error is not None
            loop.call_soon(callback, self.error)
        else:
            self.held.append(sent)

    def _acked(self, add: SentAdd) -> None:
        self.store(add.ledger_id, add.entry_id, add.body, add.master_key)
        add.callback(None)

    def ack(self, entry_id: int | None = None) -> None:
        for add in list(self.held):
            if entry_id is None or add.entry_id == entry_id:
                self.held.remove(add)
                self._acked(add)

    def fail(self, error: BKError, entry_id: int | None = None) -> None:
        for add in list(self.held):
            if entry_id is None or add.entry_id == entry_id:
                self.held.remove(add)
                add.callback(error)

    def entry_ids(self) -> list[int]:
        return [a.entry_id for a in self.adds]

    async def close(self) -> None:
        """Like a closed client: the held adds fail."""
        await super().close()
        self.fail(ClientClosedError(f"bookie client {self.bookie_id} is closed"))


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

    async def read_ledger_metadata_cached(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        return await self.read_ledger_metadata(ledger_id)  # no cache: always the latest

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
    """A client context on fake metadata whose pool connects to the world's fake bookies."""

    lm: FakeLedgerManager
    watcher: FakeWatcher
    config: ClientConfig
    bookies: dict[str, FakeBookie] = field(default_factory=dict)
    ctx: ClientContext = field(init=False)

    def __post_init__(self) -> None:
        metadata = SimpleNamespace(ledger_manager=self.lm, bookie_watcher=self.watcher)
        pool = BookieConnectionPool(self.connect)
        self.ctx = ClientContext(metadata, pool, self.config, RandomPlacement())  # type: ignore[arg-type]

    def bookie(self, bookie_id: str) -> FakeBookie:
        """The bookie ``bookie_id`` (created on first use, by the test or the client's pool)."""
        if bookie_id not in self.bookies:
            self.bookies[bookie_id] = FakeBookie(bookie_id)
        return self.bookies[bookie_id]

    def connect(self, bookie_id: str, address: BookieAddress) -> FakeBookie:
        """The pool's connector: the world's bookie of that id, whatever the address."""
        return self.bookie(bookie_id)


def make_world(bookies: int = 4, **config: Any) -> WriteWorld:
    watcher = FakeWatcher([f"b{i}" for i in range(bookies)])
    return WriteWorld(FakeLedgerManager(), watcher, ClientConfig(**config))


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

    async def slow_write(ledger_id: int, metadata: LedgerMetadata, version: int) -> Versioned[LedgerMetadata]:
        await gate.wait()
        return await original_write(ledger_id, metadata, version)

    world.lm.write_ledger_metadata = slow_write  # type: ignore[method-assign]
    return gate


def after_metadata_writes(world: WriteWorld, hook: Callable[[], None]) -> None:
    """Run ``hook`` once, right after the next metadata write is stored and before the writer
    resumes: in the same loop step as the writer's use of the new metadata (adopting an ensemble)."""
    original_write = world.lm.write_ledger_metadata

    async def hooked_write(
        ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> Versioned[LedgerMetadata]:
        written = await original_write(ledger_id, metadata, version)
        world.lm.write_ledger_metadata = original_write  # type: ignore[method-assign]
        hook()
        return written

    world.lm.write_ledger_metadata = hooked_write  # type: ignore[method-assign]
