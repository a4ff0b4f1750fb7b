"""AddEntries: the pipelined, batched add stream (the bookie's hot path).

Each request message carries a batch of adds and gets exactly one response message, in order.
Throughput comes from pipelining: a reader task keeps pulling request messages and starts each
batch at once (so the journal can group-commit several batches into one fsync), while the handler
writes responses in arrival order as batches become durable. At most ``add_stream_window``
batches of one stream are in progress; past that the reader stops reading, and gRPC/HTTP2 flow
control pushes back on the client, so memory per stream stays bounded.

On shutdown (:meth:`AddEntriesHandler.drain`) every stream stops reading new messages, answers
the ones already started, and ends normally.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from bkproto.v1 import bookie_pb2
from bookie.handlers.add_batch import AddBatchProcessor

log = logging.getLogger(__name__)

BatchFuture = asyncio.Future[bookie_pb2.AddEntriesResponse]


class AddEntriesHandler:
    def __init__(self, processor: AddBatchProcessor, window: int) -> None:
        if window < 1:
            raise ValueError(f"add stream window must be >= 1, got {window}")
        self._processor = processor
        self._window = window
        self._readers: set[asyncio.Task[None]] = set()
        # Batches whose stream went away: kept referenced until done so the adds still complete.
        self._orphans: set[BatchFuture] = set()
        self._draining = False

    async def __call__(
        self,
        request_iterator: AsyncIterator[bookie_pb2.AddEntriesRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[bookie_pb2.AddEntriesResponse]:
        # ``None`` marks the end of the request stream. The semaphore, not the queue, bounds the
        # batches in progress, so the reader can always post the end marker without blocking.
        in_progress: asyncio.Queue[BatchFuture | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self._window)
        reader = asyncio.create_task(self._read(request_iterator, in_progress, slots))
        self._readers.add(reader)
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
            self._orphan_rest(in_progress)

    async def _read(
        self,
        request_iterator: AsyncIterator[bookie_pb2.AddEntriesRequest],
        in_progress: asyncio.Queue[BatchFuture | None],
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            async for request in request_iterator:
                await slots.acquire()
                in_progress.put_nowait(asyncio.ensure_future(self._processor.process(request.adds)))
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

    @property
    def open_streams(self) -> int:
        return len(self._readers)
