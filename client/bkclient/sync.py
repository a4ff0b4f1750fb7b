"""The same client without async/await, for scripts and Spark executors.

A private event loop runs in a background thread; every call is submitted to it and the calling
thread waits for the result. Appends keep their call order. ``append_async`` returns a
``concurrent.futures.Future`` and blocks the calling thread while ``max_outstanding_adds`` adds are
already outstanding (BookKeeper's throttle), so a fast producer cannot grow memory without bound.

    with bkclient.sync.BookKeeper("127.0.0.1:2181") as bk:
        wh = bk.create_ledger(ensemble=3, write_quorum=2, password=b"pw")
        wh.append(b"payload")
        wh.close()
        for entry in bk.open_ledger(wh.ledger_id, password=b"pw").read(0, 0): ...
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from bkmeta.model import DigestType, LedgerMetadata

from . import bookkeeper as aio
from . import read_handle as aio_read
from . import write_handle as aio_write
from .config import ClientConfig
from .entry import LastConfirmedAndEntry, LedgerEntry

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bkclient-sync-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("bkclient.sync called from its own event loop thread: use bkclient (async)")
        return self.submit(coro).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _collect(iterator: AsyncIterator[LedgerEntry]) -> list[LedgerEntry]:
    return [entry async for entry in iterator]


class ReadHandle:
    def __init__(self, runner: _LoopThread, handle: aio_read.ReadHandle) -> None:
        self._runner = runner
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def length(self) -> int:
        return self._handle.length

    @property
    def is_closed(self) -> bool:
        return self._handle.is_closed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        return self._runner.run(_collect(self._handle.read(first, last)))

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        return self._runner.run(_collect(self._handle.read_unconfirmed(first, last)))

    def read_last_add_confirmed(self) -> int:
        return self._runner.run(self._handle.read_last_add_confirmed())

    def try_read_last_add_confirmed(self) -> int:
        return self._runner.run(self._handle.try_read_last_add_confirmed())

    def read_lac_long_poll(self, previous_lac: int, timeout: float) -> LastConfirmedAndEntry:
        return self._runner.run(self._handle.read_lac_long_poll(previous_lac, timeout))

    def tail(self, start: int = 0) -> Iterator[LedgerEntry]:
        """Every committed entry from ``start`` on, as it commits; ends when the ledger closes."""
        entries = self._handle.tail(start)

        async def step() -> LedgerEntry | None:
            try:
                return await anext(entries)
            except StopAsyncIteration:
                return None

        while (entry := self._runner.run(step())) is not None:
            yield entry


class WriteHandle(ReadHandle):
    def __init__(self, runner: _LoopThread, handle: aio_write.WriteHandle) -> None:
        super().__init__(runner, handle)
        self._writer = handle
        self._throttle = threading.BoundedSemaphore(handle.config.max_outstanding_adds)

    @property
    def last_add_pushed(self) -> int:
        return self._writer.last_add_pushed

    def append(self, data: bytes) -> int:
        """Append and wait until Qa bookies acknowledged; returns the entry id."""
        return self._runner.run(self._writer.append(data))

    def append_async(self, data: bytes) -> concurrent.futures.Future[int]:
        """Append without waiting for the acks (blocks only while the throttle is full)."""

        async def add() -> int:
            return await self._writer.append_async(data)

        return self._throttled(add())

    def _throttled(self, coro: Coroutine[Any, Any, int]) -> concurrent.futures.Future[int]:
        self._throttle.acquire()
        future = self._runner.submit(coro)
        future.add_done_callback(lambda _: self._throttle.release())
        return future

    def force(self) -> int:
        return self._runner.run(self._writer.force())

    def close(self) -> None:
        self._runner.run(self._writer.close())

    def __enter__(self) -> WriteHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class WriteAdvHandle(WriteHandle):
    def __init__(self, runner: _LoopThread, handle: aio_write.WriteAdvHandle) -> None:
        super().__init__(runner, handle)
        self._adv = handle

    def write(self, entry_id: int, data: bytes) -> int:
        return self._runner.run(self._adv.write(entry_id, data))

    def write_async(self, entry_id: int, data: bytes) -> concurrent.futures.Future[int]:
        async def add() -> int:
            return await self._adv.write_async(entry_id, data)

        return self._throttled(add())


class BookKeeper:
    """Blocking BookKeeper client. ``close()`` (or ``with``) stops its background loop."""

    def __init__(self, zk_hosts: str, config: ClientConfig | None = None) -> None:
        self._runner = _LoopThread()
        try:
            self._bk = self._runner.run(aio.BookKeeper.connect(zk_hosts, config))
        except BaseException:
            self._runner.stop()
            raise

    @classmethod
    def connect(cls, zk_hosts: str, config: ClientConfig | None = None) -> BookKeeper:
        return cls(zk_hosts, config)

    def close(self) -> None:
        try:
            self._runner.run(self._bk.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_ledger(
        self,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int | None = None,
        digest: DigestType | int = DigestType.CRC32,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        handle = self._runner.run(
            self._bk.create_ledger(ensemble, write_quorum, ack_quorum, digest, password, custom_metadata)
        )
        return WriteHandle(self._runner, handle)

    def create_ledger_adv(
        self,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int | None = None,
        digest: DigestType | int = DigestType.CRC32,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
    ) -> WriteAdvHandle:
        handle = self._runner.run(
            self._bk.create_ledger_adv(
                ensemble, write_quorum, ack_quorum, digest, password, custom_metadata, ledger_id
            )
        )
        return WriteAdvHandle(self._runner, handle)

    def open_ledger(
        self,
        ledger_id: int,
        password: bytes = b"",
        recovery: bool = True,
        digest: DigestType | int | None = None,
    ) -> ReadHandle:
        handle = self._runner.run(self._bk.open_ledger(ledger_id, password, recovery, digest))
        return ReadHandle(self._runner, handle)

    def delete_ledger(self, ledger_id: int) -> None:
        self._runner.run(self._bk.delete_ledger(ledger_id))

    def list_ledgers(self) -> list[int]:
        return self._runner.run(self._bk.list_ledgers())

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._runner.run(self._bk.ledger_metadata(ledger_id))

    def is_closed(self, ledger_id: int) -> bool:
        return self._runner.run(self._bk.is_closed(ledger_id))
