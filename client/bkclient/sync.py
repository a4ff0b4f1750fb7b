"""The same client without async/await, for scripts and Spark executors.

A private event loop runs in a background thread; every call is submitted to it and the calling
thread waits for the result. The calls and their arguments are those of :mod:`bkclient`; async
iterators become iterators (``read`` fetches a batch of entries per round trip to the loop, never
the whole range at once). Appends keep their call order. ``append_async`` returns a
``concurrent.futures.Future`` and, like ``append_with_callback``, blocks the calling thread while
``max_outstanding_adds`` adds are already outstanding (BookKeeper's throttle), so a fast producer
cannot grow memory without bound. Callbacks run on the client's loop thread: keep them short.

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
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from bkmeta.log_retention import Truncation
from bkmeta.model import DigestType, LedgerMetadata, Versioned
from bkmeta.named_log import LOGS_ROOT, CommitResult, LogCommit, LogSegment, PendingLedger
from bkproto.errors import BKError

from . import bookkeeper as aio
from . import named_log as aio_log
from . import read_handle as aio_read
from . import write_adv_handle as aio_write_adv
from . import write_handle as aio_write
from .config import ClientConfig
from .entry import LastConfirmedAndEntry, LedgerEntry
from .ops.add import AddCompletion

T = TypeVar("T")

# Entries fetched per round trip to the loop thread by the iterators of ``read``.
_READ_BATCH = 1000


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

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop thread (for the client's synchronous calls), its result here."""

        async def on_loop() -> T:
            return fn()

        return self.run(on_loop())

    def iterate(self, iterator: AsyncIterator[T], per_trip: int = _READ_BATCH) -> Iterator[T]:
        """The items of an async iterator living on the loop, fetched ``per_trip`` at a time."""

        async def batch() -> list[T]:
            items: list[T] = []
            async for item in iterator:
                items.append(item)
                if len(items) >= per_trip:
                    break
            return items

        try:
            while items := self.run(batch()):
                yield from items
        finally:  # also when the caller stops early: the read's requests in flight are cancelled
            self._discard(iterator)

    def _discard(self, iterator: AsyncIterator[Any]) -> None:
        if self.loop.is_closed() or not self.loop.is_running() or threading.current_thread() is self._thread:
            return  # the client is closed (nothing left to cancel), or garbage collection on the loop
        self.submit(_close(iterator)).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


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

    def read(self, first: int, last: int) -> Iterator[LedgerEntry]:
        return self._runner.iterate(self._handle.read(first, last))

    def read_unconfirmed(self, first: int, last: int) -> Iterator[LedgerEntry]:
        return self._runner.iterate(self._handle.read_unconfirmed(first, last))

    def read_entry(self, entry_id: int) -> LedgerEntry:
        return self._runner.run(self._handle.read_entry(entry_id))

    def refresh_metadata(self) -> Versioned[LedgerMetadata]:
        return self._runner.run(self._handle.refresh_metadata())

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

    def close(self) -> None:
        self._runner.run(self._handle.close())

    def __enter__(self) -> Self:  # a write handle's exit closes it as a writer (its close())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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

    def append_batch(self, payloads: Sequence[bytes]) -> int:
        """Append ``payloads`` as consecutive entries and wait until all were acknowledged;
        returns the last entry id (the async handle's ``append_batch``, whose checks apply)."""
        return self._runner.run(self._writer.append_batch(payloads))

    def append_async(self, data: bytes) -> concurrent.futures.Future[int]:
        """Append without waiting for the acks (blocks only while the throttle is full)."""

        async def add() -> int:
            return await self._writer.append_async(data)

        return self._throttled(add())

    def append_with_callback(self, data: bytes, callback: AddCompletion) -> int:
        """Append without waiting; returns the entry id. ``callback(entry_id, error or None)``
        runs on the client's loop thread, in entry-id order."""
        done = self._release_then(callback)
        return self._throttled_call(lambda: self._writer.append_with_callback(data, done))

    def _throttled(self, coro: Coroutine[Any, Any, int]) -> concurrent.futures.Future[int]:
        self._throttle.acquire()
        future = self._runner.submit(coro)
        future.add_done_callback(lambda _: self._throttle.release())
        return future

    def _throttled_call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop under one throttle slot, which the completion it sets up releases."""
        self._throttle.acquire()
        try:
            return self._runner.call(fn)
        except BaseException:
            self._throttle.release()  # refused: no completion will come
            raise

    def _release_then(self, callback: AddCompletion) -> AddCompletion:
        def done(entry_id: int, error: BKError | None) -> None:
            self._throttle.release()
            callback(entry_id, error)

        return done

    def wait_writable(self) -> None:
        self._runner.run(self._writer.wait_writable())

    def write_explicit_lac(self, lac: int | None = None) -> None:
        self._runner.run(self._writer.write_explicit_lac(lac))

    def force(self) -> int:
        return self._runner.run(self._writer.force())

    def close(self) -> None:
        self._runner.run(self._writer.close())

    def abort(self) -> None:
        self._runner.run(self._writer.abort())


class WriteAdvHandle(WriteHandle):
    def __init__(self, runner: _LoopThread, handle: aio_write_adv.WriteAdvHandle) -> None:
        super().__init__(runner, handle)
        self._adv = handle

    def write(self, entry_id: int, data: bytes) -> int:
        return self._runner.run(self._adv.write(entry_id, data))

    def write_async(self, entry_id: int, data: bytes) -> concurrent.futures.Future[int]:
        async def add() -> int:
            return await self._adv.write_async(entry_id, data)

        return self._throttled(add())

    def write_with_callback(self, entry_id: int, data: bytes, callback: AddCompletion) -> None:
        done = self._release_then(callback)
        self._throttled_call(lambda: self._adv.write_with_callback(entry_id, data, done))


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

    def logs(self, root: str = LOGS_ROOT) -> NamedLogs:
        """The cluster's named logs (see :mod:`bkclient.named_log`)."""
        return NamedLogs(self._runner, aio_log.NamedLogs(self._bk, root))


class SegmentWriter:
    """A log segment being written from a plain thread (a Spark task). ``append`` collects
    values and hands them to the loop a batch at a time: one thread round trip per entry costs
    more than the entry itself. ``close`` sends the rest, waits for every ack and
    returns the segment; a failed add is raised by the next ``append`` or by ``close``."""

    BATCH_ENTRIES = 512
    BATCH_BYTES = 1024 * 1024

    def __init__(self, runner: _LoopThread, writer: aio_log.SegmentWriter) -> None:
        self._runner = runner
        self._writer = writer
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._pending: concurrent.futures.Future[None] | None = None

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    def append(self, data: bytes) -> None:
        self._batch.append(data)
        self._batch_bytes += len(data)
        if len(self._batch) >= self.BATCH_ENTRIES or self._batch_bytes >= self.BATCH_BYTES:
            self._send()

    def _send(self) -> None:
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if batch:
            self._wait_pending()
            self._runner.run(self._writer.append_many(batch))

    def append_batch(self, values: Sequence[bytes]) -> None:
        """Send a whole batch (an Arrow batch's values) while the caller builds the next: the
        previous batch's sending is waited for first, so at most one is in flight here."""
        self._send()
        self._wait_pending()
        self._pending = self._runner.submit(self._writer.append_many(values))

    def _wait_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> LogSegment:
        self._send()
        self._wait_pending()
        return self._runner.run(self._writer.close())


class NamedLogs:
    """Blocking :class:`bkclient.named_log.NamedLogs`."""

    def __init__(self, runner: _LoopThread, logs: aio_log.NamedLogs) -> None:
        self._runner = runner
        self._logs = logs

    def names(self) -> list[str]:
        return self._runner.run(self._logs.names())

    def segments(self, name: str) -> list[LogSegment]:
        return self._runner.run(self._logs.segments(name))

    def commits(self, name: str) -> list[LogCommit]:
        return self._runner.run(self._logs.commits(name))

    def next_seq(self, name: str) -> int:
        return self._runner.run(self._logs.next_seq(name))

    def pending(self, name: str) -> dict[int, PendingLedger]:
        return self._runner.run(self._logs.pending(name))

    def truncate(
        self, name: str, *, keep_commits: int | None = None, max_age_s: float | None = None
    ) -> Truncation:
        return self._runner.run(self._logs.truncate(name, keep_commits=keep_commits, max_age_s=max_age_s))

    def open_segment(
        self, name: str, write_id: str, task: int, options: aio_log.SegmentOptions | None = None
    ) -> SegmentWriter:
        writer = self._runner.run(self._logs.open_segment(name, write_id, task, options))
        return SegmentWriter(self._runner, writer)

    def commit(
        self,
        name: str,
        write_id: str,
        segments: list[LogSegment | None],
        *,
        overwrite: bool = False,
        txn: tuple[str, int] | None = None,
    ) -> CommitResult:
        return self._runner.run(self._logs.commit(name, write_id, segments, overwrite=overwrite, txn=txn))

    def abort(self, name: str, write_id: str, *, reusable: bool = False) -> None:
        self._runner.run(self._logs.abort(name, write_id, reusable=reusable))

    def discard(self, name: str, writer: SegmentWriter) -> None:
        self._runner.run(self._logs.discard(name, writer._writer))

    def read(self, name: str, password: bytes = b"") -> Iterator[LedgerEntry]:
        return self._runner.iterate(self._logs.read(name, password))

    def read_segment(
        self, segment: LogSegment, password: bytes = b"", first: int = 0, last: int | None = None
    ) -> Iterator[LedgerEntry]:
        return self._runner.iterate(self._logs.read_segment(segment, password, first, last))

    def read_segment_batches(
        self, segment: LogSegment, password: bytes = b"", first: int = 0, last: int | None = None
    ) -> Iterator[list[LedgerEntry]]:
        """:meth:`read_segment`'s entries in lists as the bookies' answers bring them, one list
        per trip to the loop thread."""
        return self._runner.iterate(self._logs.read_segment_batches(segment, password, first, last), 1)
