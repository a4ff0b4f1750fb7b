"""AddEntries: the pipelined, batched add stream (the bookie's hot path).

Each request message carries a batch of adds and gets exactly one response message, in order.
Throughput comes from pipelining: a reader task keeps pulling request messages and starts each
batch at once (so the journal can group-commit several batches into one fsync), while the handler
writes responses in arrival order as batches become durable. At most ``add_stream_window``
batches of one stream are in progress, and at most ``add_in_progress_max_bytes`` of add messages
of all streams together (a message is always admitted when nothing else is in progress, so a
single large batch still goes through); past that the readers stop reading, and gRPC/HTTP2 flow
control pushes back on the clients. Request bytes are known without re-encoding because the
service registers :func:`parse_add_entries` as this method's deserializer.

On shutdown (:meth:`AddEntriesHandler.drain`) every stream stops reading new messages, answers
the ones already started, and ends normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NamedTuple

import grpc.aio

from bkproto.v1 import bookie_pb2
from bookie.handlers.add_batch import AddBatchProcessor

log = logging.getLogger(__name__)

BatchFuture = asyncio.Future[bookie_pb2.AddEntriesResponse]


class SizedAddEntriesRequest(NamedTuple):
    size: int  # serialized bytes, what the message costs in memory while in progress
    request: bookie_pb2.AddEntriesRequest


def parse_add_entries(data: bytes) -> SizedAddEntriesRequest:
    """The AddEntries request deserializer: the message plus its wire size."""
    return SizedAddEntriesRequest(len(data), bookie_pb2.AddEntriesRequest.FromString(data))


class InProgressBudget:
    """Bytes of add messages being processed across all streams (one event loop)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._freed = asyncio.Event()

    async def acquire(self, nbytes: int) -> None:
        while self.used and self.used + nbytes > self.max_bytes:
            self._freed.clear()
            await self._freed.wait()
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._freed.set()

    def release_for(self, nbytes: int, _done: BatchFuture) -> None:
        """Done-callback form of :meth:`release`."""
        self.release(nbytes)


class AddEntriesHandler:
    def __init__(self, processor: AddBatchProcessor, window: int, max_bytes_in_progress: int) -> None:
        if window < 1:
            raise ValueError(f"add stream window must be >= 1, got {window}")
        self._processor = processor
        self._window = window
        self.budget = InProgressBudget(max_bytes_in_progress)
        self._readers: set[asyncio.Task[None]] = set()
        # Batches whose stream went away: kept referenced until done so the adds still complete.
        self._orphans: set[BatchFuture] = set()
        self._draining = False
        self._no_streams = asyncio.Event()
        self._no_streams.set()

    def __call__(
        self,
        request_iterator: AsyncIterator[SizedAddEntriesRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[bookie_pb2.AddEntriesResponse]:
        return self.serve(request_iterator)

    async def serve(
        self, request_iterator: AsyncIterator[SizedAddEntriesRequest]
    ) -> AsyncGenerator[bookie_pb2.AddEntriesResponse, None]:
        """One add stream, whatever carries it (the gRPC AddEntries call or the add port)."""
        # ``None`` marks the end of the request stream. The semaphore, not the queue, bounds the
        # batches in progress, so the reader can always post the end marker without blocking.
        in_progress: asyncio.Queue[BatchFuture | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self._window)
        reader = asyncio.create_task(self._read(request_iterator, in_progress, slots))
        self._readers.add(reader)
        self._no_streams.clear()
        if self._draining:
            reader.cancel()
        try:
            while (batch := await in_progress.get()) is not None:
                response = await batch
                yield response
                slots.release()
        finally:
            reader.cancel()
            self._readers.discard(reader)
            if not self._readers:
                self._no_streams.set()
            self._orphan_rest(in_progress)

    async def _read(
        self,
        request_iterator: AsyncIterator[SizedAddEntriesRequest],
        in_progress: asyncio.Queue[BatchFuture | None],
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            budget = self.budget
            async for size, request in request_iterator:
                await slots.acquire()
                await budget.acquire(size)
                batch = asyncio.ensure_future(self._processor.process(request.adds))
                # Released when the batch is durable, not when its response is sent: a client
                # that stops reading responses must not hold other streams' budget.
                batch.add_done_callback(functools.partial(budget.release_for, size))
                in_progress.put_nowait(batch)
        except asyncio.CancelledError:
            pass  # shutdown or the stream ended: answer what was started
        except Exception as exc:  # noqa: BLE001 - a broken stream ends this stream, never the bookie
            log.debug("add stream ended by the client: %r", exc)
        finally:
            in_progress.put_nowait(None)

    def _orphan_rest(self, in_progress: asyncio.Queue[BatchFuture | None]) -> None:
        while not in_progress.empty():
            batch = in_progress.get_nowait()
            if batch is not None:
                self._keep_until_done(batch)

    def _keep_until_done(self, batch: BatchFuture) -> None:
        if batch.done():
            return
        self._orphans.add(batch)
        batch.add_done_callback(self._orphans.discard)

    def drain(self) -> None:
        """Stop reading new add messages on every stream; started batches are still answered."""
        self._draining = True
        for reader in list(self._readers):
            reader.cancel()

    async def wait_streams_ended(self, timeout_s: float) -> None:
        """Return once no add stream is open (after :meth:`drain`), or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_streams.wait(), timeout_s)

    @property
    def open_streams(self) -> int:
        return len(self._readers)
