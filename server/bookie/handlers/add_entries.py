"""AddEntries: the pipelined, batched add stream (the bookie's hot path).

Each request message carries a batch of adds and gets exactly one response message, in order.
Throughput comes from pipelining: a reader task keeps pulling request messages and starts each
batch at once (so the journal can group-commit several batches into one fsync), while the handler
writes responses in arrival order as batches become durable. At most ``add_stream_window``
batches of one stream are in progress, and at most ``add_in_progress_max_bytes`` of add messages
of all streams together, of which one peer (IP address) holds at most its share (a message is
always admitted when its peer has nothing else in progress, so a single large batch still goes
through); past that the readers stop reading, and gRPC/HTTP2 flow control pushes back on the
clients. Until its answer is written a message also holds its bytes in the ``unanswered`` budget,
so a client that never reads its answers stops being read once its share is full. Request bytes
are known without re-encoding because the service registers :class:`AddEntriesDecoder` as this
method's deserializer; it also refuses a message of more than ``maxAddsPerMessage`` adds before
decoding it.

The gRPC stream is served by :meth:`AddEntriesHandler.serve` (a reader task, a queue, an async
generator of answers). An add-port connection takes the same window and budgets through an
:class:`~bookie.handlers.add_pipeline.AddPipeline` (:meth:`AddEntriesHandler.open_pipeline`)
instead, without a task of its own: what a message per add costs is mostly such machinery.

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
from google.protobuf.message import DecodeError

from bkmeta.serde import decode_varint
from bkproto.grpc_add_stream import ACCEPTED
from bkproto.v1 import bookie_pb2
from bkproto.wire import COUNT_OK
from bookie.handlers.add_batch import AddBatchProcessor
from bookie.handlers.add_message import COUNT_OK_TAG, DecodedAddEntries, MessageAdds, decoded, packed_only
from bookie.handlers.add_pipeline import AddPipeline, AddStreamCarrier
from bookie.handlers.common import HandlerLimits
from bookie.limits import PeerByteBudget, peer_host

log = logging.getLogger(__name__)

BatchFuture = asyncio.Future[bookie_pb2.AddEntriesResponse]
# Memory one add costs beyond its wire bytes while in progress: its decoded AddRequest (~84 bytes)
# and its result in the answer (~68), measured with 90,000 keyless adds (RSS growth per add). A
# packed add costs less: its entry id and its body's bytes object in place of the AddRequest.
ADD_MEMORY_BYTES = 160


class SizedAddEntriesRequest(NamedTuple):
    size: int  # serialized bytes, what the message costs in memory while in progress
    # ``request.adds``: every add of the message, per-add and packed, in answer order
    request: bookie_pb2.AddEntriesRequest | DecodedAddEntries


class TooManyAdds(DecodeError):
    """An add-stream message with more adds than ``maxAddsPerMessage``: the stream ends."""


_ADDS_TAG = 0x0A  # field 1 (adds), length-delimited: every top-level add starts with this byte
_ADDS_FIELD = 1
_PACKED_FIELD = 2  # AddEntriesRequest.packed: a group of adds of one ledger
_PACKED_TAG = b"\x12"  # its tag: field 2, length-delimited
_ENTRY_IDS_FIELD = 5  # PackedAdds.entry_ids (sfixed64): one per add of the group
# The smallest add on the wire: a per-add one's tag and a zero length; a packed one's entry id
# alone is 8 bytes, and an empty group (counted as one add) is 2.
_MIN_ADD_BYTES = 2


class AddEntriesDecoder:
    """The AddEntries request deserializer: the message plus its wire size, refusing a message of
    more than ``max_adds`` adds before decoding it (decoding millions of tiny adds would stall the
    event loop by itself)."""

    def __init__(self, max_adds: int) -> None:
        self.max_adds = max_adds

    def __call__(self, data: bytes | bytearray) -> SizedAddEntriesRequest:
        # An add takes at least 2 bytes on the wire (its tag and its length), so a message of at
        # most twice the limit cannot exceed it, and is not counted. A larger one is counted by
        # its top-level fields, not decoded: a batch of equal adds in a few strided slices, any
        # other add by add, stopping as soon as it is past the limit.
        max_adds = self.max_adds
        if len(data) > _MIN_ADD_BYTES * max_adds and _count_adds(data, max_adds) > max_adds:
            raise TooManyAdds(f"a message with more than {max_adds} adds (maxAddsPerMessage)")
        return parse_add_entries(data)


def parse_add_entries(data: bytes | bytearray) -> SizedAddEntriesRequest:
    """The message plus its wire size, whatever its number of adds (tests and tools); its packed
    groups, if any, unpacked. A message of packed groups alone (the client's usual) is read
    without protobuf (:func:`bookie.handlers.add_message.packed_only`)."""
    if data[:1] == _PACKED_TAG:
        packed = packed_only(data if type(data) is bytes else bytes(data))
        if packed is not None:
            adds = MessageAdds((), packed.groups)
            return SizedAddEntriesRequest(len(data), DecodedAddEntries(adds, packed.count_ok))
    # The stubs say bytes; upb parses any buffer, and copies what it keeps (the add port's bytearray)
    message = bookie_pb2.AddEntriesRequest.FromString(data)  # type: ignore[arg-type]
    return SizedAddEntriesRequest(len(data), decoded(message))


def _count_adds(data: bytes | bytearray, limit: int) -> int:
    """Adds of a serialized AddEntriesRequest, counted up to ``limit + 1``: each ``adds`` field,
    and each packed group's entry ids (an empty group as one, so a message of countless empty
    groups is refused like one of countless adds)."""
    try:
        uniform = _equal_adds(data)
        return uniform if uniform is not None else _walk_adds(data, limit)
    except ValueError as exc:  # a truncated or overlong varint
        raise DecodeError(str(exc)) from None


def _equal_adds(data: bytes | bytearray) -> int | None:
    """How many adds the message holds if it is nothing but adds of the first one's size (a batch
    of equal entries, the usual full message), maybe followed by ``count_ok``, else None.
    Checked in C: each add's tag and length bytes, at every multiple of that size, are the first
    add's (strided slices), so the message parses as exactly that many adds."""
    if not data or data[0] != _ADDS_TAG:
        return None
    length, pos = decode_varint(data, 1)
    stride = pos + length
    end = len(data)
    if end % stride and data.endswith(COUNT_OK):
        end -= len(COUNT_OK)
    if end % stride:
        return None
    count = end // stride
    for offset in range(pos):
        if data[offset:end:stride] != data[offset : offset + 1] * count:
            return None
    return count


def _walk_adds(data: bytes | bytearray, limit: int) -> int:
    """:func:`_count_fields` with the usual field (an add under 16 KiB: a 0x0A tag, a length
    of one or two bytes) inlined; anything else, from the start, by the general walk."""
    count = pos = 0
    end = len(data)
    try:
        while pos < end and count <= limit:
            tag = data[pos]
            if tag != _ADDS_TAG:
                if tag == COUNT_OK_TAG and data[pos + 1] < 0x80:
                    pos += 2
                    continue
                return _count_fields(data, limit)
            low = data[pos + 1]
            if low < 0x80:
                pos += 2 + low
            else:
                high = data[pos + 2]
                if high >= 0x80:
                    return _count_fields(data, limit)
                pos += 3 + ((low & 0x7F) | (high << 7))
            count += 1
    except IndexError:  # a truncated last field: the general walk says how
        return _count_fields(data, limit)
    return count


def _count_fields(data: bytes | bytearray, limit: int) -> int:
    count = pos = 0
    end = len(data)
    while pos < end and count <= limit:
        tag, pos = decode_varint(data, pos)
        wire_type = tag & 7
        if wire_type == 2:  # length-delimited: adds, a packed group, or an unknown field
            length, pos = decode_varint(data, pos)
            field = tag >> 3
            if field == _ADDS_FIELD:
                count += 1
            elif field == _PACKED_FIELD:
                count += max(1, _group_entry_ids(data, pos, min(pos + length, end), limit - count))
            pos += length
        else:
            pos = _skip_scalar(data, pos, wire_type)
    return count


def _group_entry_ids(data: bytes | bytearray, pos: int, end: int, limit: int) -> int:
    """The entry ids of the PackedAdds group in ``data[pos:end]``, by its fields' lengths (a
    group has a handful of fields: its bodies are skipped, not read), counted up to ``limit + 1``."""
    count = 0
    while pos < end and count <= limit:
        tag, pos = decode_varint(data, pos)
        wire_type = tag & 7
        if wire_type == 2:
            length, pos = decode_varint(data, pos)
            if tag >> 3 == _ENTRY_IDS_FIELD:  # packed: 8 bytes an id
                count += -(-length // 8)
            pos += length
        else:
            count += tag >> 3 == _ENTRY_IDS_FIELD  # an id sent unpacked (sfixed64: wire type 1)
            pos = _skip_scalar(data, pos, wire_type)
    return count


def _skip_scalar(data: bytes | bytearray, pos: int, wire_type: int) -> int:
    """The position after a field's value of ``wire_type`` (not length-delimited) at ``pos``."""
    if wire_type == 0:
        return decode_varint(data, pos)[1]
    if wire_type in (1, 5):
        return pos + (8 if wire_type == 1 else 4)
    raise DecodeError(f"unexpected wire type {wire_type}")


class AddEntriesHandler:
    def __init__(self, processor: AddBatchProcessor, limits: HandlerLimits) -> None:
        if limits.add_stream_window < 1:
            raise ValueError(f"add stream window must be >= 1, got {limits.add_stream_window}")
        self.processor = processor
        self._window = limits.add_stream_window
        self.budget = PeerByteBudget(
            limits.add_in_progress_max_bytes, limits.add_in_progress_max_bytes_per_peer
        )
        self.unanswered = PeerByteBudget(
            limits.add_unanswered_max_bytes, limits.add_unanswered_max_bytes_per_peer
        )
        self._readers: set[asyncio.Task[None]] = set()  # one per gRPC stream
        self._pipelines: set[AddPipeline] = set()  # one per add-port stream
        # Batches whose stream went away: kept referenced until done so the adds still complete.
        self._orphans: set[BatchFuture] = set()
        self._draining = False
        self._no_streams = asyncio.Event()
        self._no_streams.set()

    async def __call__(
        self,
        request_iterator: AsyncIterator[SizedAddEntriesRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[bookie_pb2.AddEntriesResponse]:
        # The call is taken (the guard, if any, let it through): the client writes only after this.
        await context.send_initial_metadata((ACCEPTED,))
        async for response in self.serve(request_iterator, peer_host(context.peer())):
            yield response

    async def serve(
        self, request_iterator: AsyncIterator[SizedAddEntriesRequest], peer: str = ""
    ) -> AsyncGenerator[bookie_pb2.AddEntriesResponse, None]:
        """One add stream, whatever carries it (the gRPC AddEntries call or the add port), from
        ``peer`` (an IP address: the unit of the per-peer shares of the byte budgets)."""
        # ``None`` marks the end of the request stream. The semaphore, not the queue, bounds the
        # batches in progress, so the reader can always post the end marker without blocking.
        in_progress: asyncio.Queue[tuple[BatchFuture, int] | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self._window)
        reader = asyncio.create_task(self._read(request_iterator, in_progress, slots, peer))
        self._readers.add(reader)
        self._no_streams.clear()
        if self._draining:
            reader.cancel()
        unanswered = self.unanswered
        try:
            while (item := await in_progress.get()) is not None:
                batch, size = item
                try:
                    response = await batch
                    yield response
                finally:
                    unanswered.release(peer, size)
                slots.release()
        finally:
            reader.cancel()
            self._readers.discard(reader)
            self._stream_ended()
            self._orphan_rest(in_progress, peer)

    async def _read(
        self,
        request_iterator: AsyncIterator[SizedAddEntriesRequest],
        in_progress: asyncio.Queue[tuple[BatchFuture, int] | None],
        slots: asyncio.Semaphore,
        peer: str,
    ) -> None:
        try:
            budget = self.budget
            unanswered = self.unanswered
            async for message in request_iterator:
                request = message.request
                size = self.message_cost(message)
                await slots.acquire()
                # Held until the answer is written: a peer that stops reading its answers stops
                # being read once its share is full, and holds no one else's.
                await unanswered.acquire(peer, size)
                try:
                    await budget.acquire(peer, size)
                except BaseException:
                    unanswered.release(peer, size)
                    raise
                batch = asyncio.ensure_future(self.processor.process(request.adds, request.count_ok))
                # Released when the batch is durable, not when its response is sent: a client
                # that stops reading responses must not hold the bookie's processing budget.
                batch.add_done_callback(functools.partial(budget.release_for, peer, size))
                in_progress.put_nowait((batch, size))
        except asyncio.CancelledError:
            pass  # shutdown or the stream ended: answer what was started
        except Exception as exc:  # noqa: BLE001 - a broken stream ends this stream, never the bookie
            log.debug("add stream ended by the client: %r", exc)
        finally:
            in_progress.put_nowait(None)

    def _orphan_rest(self, in_progress: asyncio.Queue[tuple[BatchFuture, int] | None], peer: str) -> None:
        while not in_progress.empty():
            item = in_progress.get_nowait()
            if item is not None:
                batch, size = item
                self.unanswered.release(peer, size)
                self._keep_until_done(batch)

    def _keep_until_done(self, batch: BatchFuture) -> None:
        """Keep a batch whose stream went away referenced until it is done, so its adds complete."""
        if batch.done():
            return
        self._orphans.add(batch)
        batch.add_done_callback(self._orphans.discard)

    @staticmethod
    def message_cost(message: SizedAddEntriesRequest) -> int:
        """What a message and its answer hold in memory while in progress: the wire bytes, plus
        per add its decoded message and its result (each a few times its wire size for tiny adds)."""
        return message.size + ADD_MEMORY_BYTES * len(message.request.adds)

    def open_pipeline(self, carrier: AddStreamCarrier, peer: str) -> AddPipeline:
        """An add stream from ``peer`` (an IP address) whose carrier reads and writes without a
        task of its own (the add port); :meth:`AddPipeline.close` when it ends."""
        pipeline = AddPipeline(self, peer, carrier, self._window)
        self._pipelines.add(pipeline)
        self._no_streams.clear()
        if self._draining:
            carrier.stop_reading()
        return pipeline

    def pipeline_ended(self, pipeline: AddPipeline) -> None:
        self._pipelines.discard(pipeline)
        self._stream_ended()

    def _stream_ended(self) -> None:
        if not self._readers and not self._pipelines:
            self._no_streams.set()

    def drain(self) -> None:
        """Stop reading new add messages on every stream; started batches are still answered."""
        self._draining = True
        for reader in list(self._readers):
            reader.cancel()
        for pipeline in list(self._pipelines):
            pipeline.stop_reading()

    async def wait_streams_ended(self, timeout_s: float) -> None:
        """Return once no add stream is open (after :meth:`drain`), or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_streams.wait(), timeout_s)

    @property
    def open_streams(self) -> int:
        return len(self._readers) + len(self._pipelines)
