"""One connection per bookie: a grpc.aio channel, a coalescing add stream and unary calls.

Adds are the hot path. A Python gRPC message costs hundreds of microseconds of CPU while an entry's
own work costs a few, so every add queued while the previous stream message was being written goes
into the next message (natural batching: the busier the connection, the bigger the batches). At most
``max_inflight_messages`` messages wait for their response; past that, adds accumulate in the queue
(bounded upstream by the write handle's outstanding-adds/bytes limits) and leave in the next message.
While adds queue up, messages also leave at most every ``min_batch_interval_s``: a bookie that
answers fast would otherwise be sent a message per round trip, each a few entries, and on a busy
host the per-message CPU is what makes the latency. A lone add is never held back.

Responses come back one per request message, in order, with one status per add: the receiver pops
the oldest in-flight batch and completes its adds (aiokafka's multiplexed in-flight requests). If the
stream breaks, every add in flight or queued fails with :class:`BookieUnavailableError`; the next add
opens a new stream. gRPC errors never leave this module untranslated.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import grpc
import grpc.aio

from bkproto.errors import (
    BKError,
    BookieUnavailableError,
    ClientClosedError,
    UnexpectedConditionError,
    error_for_status,
)
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

from .read_stream import ReadStream
from .rpc_errors import run_stream_loop, translate_rpc_error

log = logging.getLogger(__name__)

EOK = bookie_pb2.EOK
ENOENTRY = bookie_pb2.ENOENTRY
MiB = 1024 * 1024
# Room for a 5 MiB entry plus framing; BookKeeper's nettyMaxFrameSizeBytes is 5 MiB.
MAX_MESSAGE_BYTES = 16 * MiB

# Completion callback of one add: ``None`` on success, the error otherwise.
AddCallback = Callable[[BKError | None], None]


class ReadResult(NamedTuple):
    body: bytes
    max_lac: int


class StrideResult(NamedTuple):
    """A stride poll's answer: entries first, first + stride, ... (none when it timed out or the
    bookie does not hold ``first``) and the bookie's LAC."""

    bodies: list[bytes]
    max_lac: int


@dataclass(frozen=True, slots=True)
class BookieClientOptions:
    """Connection tuning. Defaults suit a few bookies on one host as well as a real cluster."""

    max_inflight_messages: int = 1  # add-stream messages awaiting a response (window)
    min_batch_interval_s: float = 0.0  # while adds queue: at most one message per interval
    max_batch_bytes: int = 4 * MiB  # bodies per add-stream message, kept under MAX_MESSAGE_BYTES
    default_timeout_s: float = 10.0  # unary calls without an explicit timeout


_ONE_BYTE_VARINTS = tuple(bytes((i,)) for i in range(0x80))


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint (negative int64 as its 10-byte two's complement). Ids, lengths
    and sizes of a few KiB take the unrolled paths: this runs three times per entry."""
    if 0 <= value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if 0 <= value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 <= value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class AddRequestEncoder:
    """Wire bytes of ``AddEntriesRequest.adds`` elements for one ledger, without protobuf objects.

    An entry's AddRequest is identical for all Qw bookies, so it is serialized once and the same
    bytes join each bookie's next stream message (a repeated field is just its elements
    concatenated). Building protobuf messages per add and per bookie cost more CPU than
    everything else a client does for an entry. The bytes equal ``SerializeToString`` of the
    message (proto3: zero-valued fields omitted), which the unit tests check."""

    __slots__ = ("_key", "_ledger")

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        self._ledger = b"\x08" + _varint(ledger_id) if ledger_id else b""
        self._key = b"\x1a" + _varint(len(master_key)) + master_key if master_key else b""

    def encode(self, entry_id: int, body: bytes, recovery: bool = False) -> bytes:
        """``adds`` field 1 framing (tag, length) + the AddRequest message."""
        return self.encode_split(entry_id, b"", b"", body, recovery)

    def encode_split(
        self, entry_id: int, header: bytes, digest: bytes, payload: bytes, recovery: bool = False
    ) -> bytes:
        """:meth:`encode` of the body ``header || digest || payload``, given in its parts so the
        payload is copied once, straight into the result (building the body, then the message,
        then its framing, copied it three times per entry)."""
        size = len(header) + len(digest) + len(payload)
        fields = (self._ledger + b"\x10" + _varint(entry_id)) if entry_id else self._ledger
        fields += self._key
        if size:
            fields += b"\x22" + _varint(size)
        flags = b"\x28\x01" if recovery else b""  # flags = RECOVERY_ADD
        length = _varint(len(fields) + size + len(flags))
        return b"".join((b"\x0a", length, fields, header, digest, payload, flags))


class AddListener(Protocol):
    """Receives add completions without a closure per add (the hot path: a PendingAddOp
    listens for each bookie of its write set, ``token`` telling which)."""

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None: ...


class _CallbackListener:
    """Adapts a plain completion callback to :class:`AddListener`."""

    __slots__ = ("_callback",)

    def __init__(self, callback: AddCallback) -> None:
        self._callback = callback

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        self._callback(error)


# The adds of one stream message, in order: who to tell and with which token.
_Batch = tuple[list[AddListener], list[int]]


def _notify(listener: AddListener, token: int, bookie_id: str, error: BKError | None) -> None:
    try:
        listener.add_complete(bookie_id, token, error)
    except Exception:  # one broken listener must not strand the other adds of the batch
        log.exception("add completion callback failed")


class _AddStream:
    """One AddEntries bidi stream: a sender task coalescing queued adds, a receiver task
    completing them. Lives until the stream fails or the client closes; never restarts.

    Queued adds live in three parallel deques rather than one tuple each: with thousands of
    adds outstanding, every long-lived object per add costs garbage-collector time."""

    def __init__(self, client: BookieClient, call: Any) -> None:
        self._client = client
        self._call = call
        self._options = client.options
        self._queued_bytes: deque[bytes] = deque()
        self._queued_listeners: deque[AddListener] = deque()
        self._queued_tokens: deque[int] = deque()
        self._inflight: deque[_Batch] = deque()
        self._wakeup = asyncio.Event()
        self._window = asyncio.Event()
        self._window.set()
        self.failed = False
        self.messages_sent = 0
        bookie_id = client.bookie_id
        self._sender = asyncio.create_task(
            run_stream_loop(self._send_loop, self.fail, bookie_id, "add"), name=f"bk-add-send-{bookie_id}"
        )
        self._receiver = asyncio.create_task(
            run_stream_loop(self._recv_loop, self.fail, bookie_id, "add"), name=f"bk-add-recv-{bookie_id}"
        )

    def enqueue(self, encoded: bytes, listener: AddListener, token: int) -> None:
        self._queued_bytes.append(encoded)
        self._queued_listeners.append(listener)
        self._queued_tokens.append(token)
        self._wakeup.set()

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._options.min_batch_interval_s
        last_sent = -interval
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queued_bytes:
                while len(self._inflight) >= self._options.max_inflight_messages:
                    self._window.clear()
                    await self._window.wait()
                if len(self._queued_bytes) > 1:  # adds are queueing: a fuller message pays
                    delay = last_sent + interval - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                request, batch = self._take_batch()
                # In flight before the write: a response can only follow the write.
                self._inflight.append(batch)
                last_sent = loop.time()
                await self._call.write(request)
                self.messages_sent += 1

    def _take_batch(self) -> tuple[bytes, _Batch]:
        """The next message (a serialized AddEntriesRequest) and the adds it carries."""
        queue = self._queued_bytes
        budget = self._options.max_batch_bytes
        count = 1  # always at least one, even if it alone exceeds the budget
        size = len(queue[0])
        for encoded in itertools.islice(queue, 1, None):
            size += len(encoded)
            if size > budget:
                break
            count += 1
        if count == len(queue):
            parts = list(queue)
            listeners = list(self._queued_listeners)
            tokens = list(self._queued_tokens)
            queue.clear()
            self._queued_listeners.clear()
            self._queued_tokens.clear()
        else:
            popleft = queue.popleft
            parts = [popleft() for _ in range(count)]
            pop_listener = self._queued_listeners.popleft
            listeners = [pop_listener() for _ in range(count)]
            pop_token = self._queued_tokens.popleft
            tokens = [pop_token() for _ in range(count)]
        return b"".join(parts), (listeners, tokens)

    async def _recv_loop(self) -> None:
        bookie_id = self._client.bookie_id
        while True:
            response = await self._call.read()
            if response is grpc.aio.EOF:  # type: ignore[attr-defined]
                self.fail(BookieUnavailableError(f"bookie {bookie_id}: add stream closed by bookie"))
                return
            if not self._inflight:
                self.fail(UnexpectedConditionError(f"bookie {bookie_id}: response without request"))
                return
            listeners, tokens = self._inflight.popleft()
            self._window.set()
            results = response.results
            if len(results) != len(listeners):
                self.fail(
                    UnexpectedConditionError(
                        f"bookie {bookie_id}: {len(results)} results for {len(listeners)} adds"
                    )
                )
                bad = BookieUnavailableError(f"bookie {bookie_id}: bad response")
                for listener, token in zip(listeners, tokens, strict=True):
                    _notify(listener, token, bookie_id, bad)
                return
            for listener, token, result in zip(listeners, tokens, results, strict=True):
                status = result.status
                if status == EOK:
                    _notify(listener, token, bookie_id, None)
                else:
                    _notify(listener, token, bookie_id, error_for_status(status, result.message))

    def fail(self, error: BKError) -> None:
        """Fail every add in flight or queued, stop both tasks, cancel the call. Idempotent."""
        if self.failed:
            return
        self.failed = True
        self._client._stream_failed(self)
        if not isinstance(error, ClientClosedError):
            log.info("%s", error)
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not current:
                task.cancel()
        self._call.cancel()
        listeners: list[AddListener] = []
        tokens: list[int] = []
        for batch_listeners, batch_tokens in self._inflight:
            listeners += batch_listeners
            tokens += batch_tokens
        listeners += self._queued_listeners
        tokens += self._queued_tokens
        self._inflight.clear()
        self._queued_bytes.clear()
        self._queued_listeners.clear()
        self._queued_tokens.clear()
        bookie_id = self._client.bookie_id
        for listener, token in zip(listeners, tokens, strict=True):
            _notify(listener, token, bookie_id, error)

    async def wait_closed(self) -> None:
        await asyncio.gather(self._sender, self._receiver, return_exceptions=True)


class BookieClient:
    """The client side of one bookie. Create and use it on the event loop that will run it."""

    def __init__(self, bookie_id: str, address: str, options: BookieClientOptions | None = None) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.options = options or BookieClientOptions()
        self._channel = grpc.aio.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # Reconnect quickly after a bookie restarts; gRPC's default backoff reaches 120 s.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
                # Notice a bookie that stopped answering (hung, or its host vanished) even while a
                # stream is open: without pings such a stream would hold its adds forever. The
                # bookie allows pings every 5 s (grpc.http2.min_ping_interval_without_data_ms).
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
            ],
        )
        self._stub: Any = bookie_pb2_grpc.BookieStub(self._channel)  # type: ignore[no-untyped-call]
        # AddEntries with pre-serialized requests (see AddRequestEncoder): bytes go out as they are.
        self._add_entries: Any = self._channel.stream_stream(
            "/bkproto.v1.Bookie/AddEntries",
            request_serializer=None,
            response_deserializer=bookie_pb2.AddEntriesResponse.FromString,
        )
        self._read_stream_call: Any = self._channel.stream_stream(
            "/bkproto.v1.Bookie/ReadStream",
            request_serializer=bookie_pb2.ReadStreamRequest.SerializeToString,
            response_deserializer=bookie_pb2.ReadStreamResponse.FromString,
        )
        self._stream: _AddStream | None = None
        self._read_stream: ReadStream | None = None
        self._closed = False
        self.streams_opened = 0

    # -- adds ----------------------------------------------------------------------------------

    def add_with_callback(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        callback: AddCallback,
        recovery: bool = False,
    ) -> None:
        """Queue an add; ``callback(None)`` on success or ``callback(error)``. The callback runs
        on the loop, once, possibly before this returns if the client is closed."""
        encoded = AddRequestEncoder(ledger_id, master_key).encode(entry_id, body, recovery)
        self.add_encoded(encoded, _CallbackListener(callback), 0)

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        """Queue an add already serialized by :class:`AddRequestEncoder` (the hot path: the
        write handle encodes an entry once for all bookies of its write set). Its completion
        calls ``listener.add_complete(self.bookie_id, token, error or None)`` on the loop."""
        if self._closed:
            listener.add_complete(
                self.bookie_id, token, ClientClosedError(f"bookie client {self.bookie_id} is closed")
            )
            return
        stream = self._stream
        if stream is None:
            stream = self._open_stream()
        stream.enqueue(encoded, listener, token)

    def add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False
    ) -> asyncio.Future[None]:
        """Queue an add; the future completes when this bookie acknowledged it (durably)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BKError | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.add_with_callback(ledger_id, entry_id, master_key, body, done, recovery)
        return future

    def _open_stream(self) -> _AddStream:
        call = self._add_entries()
        self._stream = _AddStream(self, call)
        self.streams_opened += 1
        return self._stream

    def _stream_failed(self, stream: _AddStream) -> None:
        if self._stream is stream:
            self._stream = None

    # -- unary calls ---------------------------------------------------------------------------

    async def _unary(self, method: Any, request: Any, timeout: float | None) -> Any:  # noqa: ASYNC109 - the gRPC deadline
        if self._closed:
            raise ClientClosedError(f"bookie client {self.bookie_id} is closed")
        try:
            response = await method(request, timeout=timeout or self.options.default_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise translate_rpc_error(self.bookie_id, exc) from exc
        if response.status != EOK:
            raise error_for_status(response.status, f"bookie {self.bookie_id}: {response.message}")
        return response

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence_master_key: bytes | None = None,
        previous_lac: int | None = None,
        long_poll_timeout_ms: int = 0,
        piggyback: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the gRPC deadline
    ) -> ReadResult:
        """Read one entry (``entry_id == -1``: the bookie's last entry). With
        ``fence_master_key`` the read fences the ledger; with ``previous_lac`` it long-polls
        until the bookie's LAC passes it or ``long_poll_timeout_ms`` expires. A long poll whose
        LAC moved on a bookie without the entry returns an empty body with the new LAC."""
        flags = 0
        request = bookie_pb2.ReadRequest(ledger_id=ledger_id, entry_id=entry_id)
        if fence_master_key is not None:
            flags |= bookie_pb2.FENCE_LEDGER
            request.master_key = fence_master_key
        if previous_lac is not None:
            request.previous_lac = previous_lac
            request.timeout_ms = long_poll_timeout_ms
            if timeout is None:  # the RPC must outlive the bookie-side wait
                timeout = long_poll_timeout_ms / 1000.0 + self.options.default_timeout_s
        if piggyback:
            flags |= bookie_pb2.ENTRY_PIGGYBACK
        request.flags = flags
        if previous_lac is None:
            response = await self._unary(self._stub.ReadEntry, request, timeout)
        else:
            response = await self._long_poll(request, timeout or self.options.default_timeout_s)
        return ReadResult(response.body, response.max_lac)

    def _reads(self) -> ReadStream:
        if self._closed:
            raise ClientClosedError(f"bookie client {self.bookie_id} is closed")
        stream = self._read_stream
        if stream is None or stream.failed:
            stream = self._read_stream = ReadStream(self.bookie_id, self._read_stream_call())
        return stream

    async def _long_poll(self, request: bookie_pb2.ReadRequest, timeout_s: float) -> bookie_pb2.ReadResponse:
        """A long-poll read over the bookie's ReadStream (tailing readers park many at once)."""
        response = (await self._reads().request(timeout_s, read=request)).read
        if response.status == ENOENTRY and response.max_lac > request.previous_lac:
            # The LAC moved but this bookie does not hold the entry asked for: the LAC is the news
            # (an empty body says so), and raising would lose it.
            return response
        if response.status != EOK:
            raise error_for_status(response.status, f"bookie {self.bookie_id}: {response.message}")
        return response

    async def stride_poll(
        self,
        ledger_id: int,
        first: int,
        stride: int,
        max_count: int,
        max_bytes: int,
        long_poll_timeout_ms: int,
    ) -> StrideResult:
        """Park until the bookie's LAC reaches ``first``, then the confirmed entries ``first``,
        ``first + stride``, ... it holds (see StridePollRequest). A timeout, or a LAC past
        ``first`` on a bookie without it, is an empty answer with the bookie's LAC."""
        request = bookie_pb2.StridePollRequest(
            ledger_id=ledger_id,
            first_entry_id=first,
            stride=stride,
            max_count=max_count,
            max_bytes=max_bytes,
            timeout_ms=long_poll_timeout_ms,
        )
        timeout_s = long_poll_timeout_ms / 1000.0 + self.options.default_timeout_s
        response = (await self._reads().request(timeout_s, stride_poll=request)).stride_poll
        if response.status == ENOENTRY:
            return StrideResult([], response.max_lac)
        if response.status != EOK:
            raise error_for_status(response.status, f"bookie {self.bookie_id}: {response.message}")
        return StrideResult(list(response.bodies), response.max_lac)

    async def read_entries(
        self,
        ledger_id: int,
        first: int,
        max_count: int,
        max_bytes: int,
        *,
        stride: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109 - the gRPC deadline
    ) -> list[bytes]:
        """Entry bodies ``first``, ``first + stride``, ... (at least one if ``first`` exists),
        up to the first this bookie does not hold."""
        request = bookie_pb2.ReadEntriesRequest(
            ledger_id=ledger_id, first_entry_id=first, max_count=max_count, max_bytes=max_bytes, stride=stride
        )
        response = await self._unary(self._stub.ReadEntries, request, timeout)
        return list(response.bodies)

    async def read_lac(
        self, ledger_id: int, *, timeout: float | None = None  # noqa: ASYNC109 - the gRPC deadline
    ) -> tuple[bytes | None, bytes | None]:
        """(explicit LAC body, last stored entry body), each ``None`` when the bookie has none."""
        request = bookie_pb2.ReadLacRequest(ledger_id=ledger_id)
        response = await self._unary(self._stub.ReadLac, request, timeout)
        return (response.lac_body or None, response.last_entry_body or None)

    async def write_lac(
        self, ledger_id: int, lac: int, master_key: bytes, body: bytes, *, timeout: float | None = None  # noqa: ASYNC109 - the gRPC deadline
    ) -> None:
        request = bookie_pb2.WriteLacRequest(ledger_id=ledger_id, lac=lac, master_key=master_key, body=body)
        await self._unary(self._stub.WriteLac, request, timeout)

    async def force_ledger(self, ledger_id: int, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 - the gRPC deadline
        """Returns once everything this bookie acknowledged for the ledger is durable."""
        await self._unary(self._stub.ForceLedger, bookie_pb2.ForceLedgerRequest(ledger_id=ledger_id), timeout)

    async def get_bookie_info(self, *, timeout: float | None = None) -> tuple[int, int]:  # noqa: ASYNC109 - the gRPC deadline
        """(total disk capacity, free disk space) in bytes."""
        request = bookie_pb2.GetBookieInfoRequest(
            requested=bookie_pb2.TOTAL_DISK_CAPACITY | bookie_pb2.FREE_DISK_SPACE
        )
        response = await self._unary(self._stub.GetBookieInfo, request, timeout)
        return (response.total_disk_capacity, response.free_disk_space)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Fail outstanding adds with ClientClosedError and close the channel."""
        if self._closed:
            return
        self._closed = True
        stream = self._stream
        if stream is not None:
            stream.fail(ClientClosedError(f"bookie client {self.bookie_id} is closed"))
            await stream.wait_closed()
        read_stream = self._read_stream
        if read_stream is not None:
            read_stream.fail(ClientClosedError(f"bookie client {self.bookie_id} is closed"))
            await read_stream.wait_closed()
        await self._channel.close(None)


# Resolves a bookie id to its gRPC address; ``None`` when the id is not registered.
AddressResolver = Callable[[str], str | None]


class BookieClientPool:
    """One :class:`BookieClient` per bookie id, created on first use.

    Ids resolve through ``resolver`` (the registration's service info); an id that does not resolve
    is used as ``host:port`` itself, BookKeeper's default bookie id. A client whose resolved address
    changed (bookie restarted elsewhere) is replaced."""

    def __init__(
        self, resolver: AddressResolver | None = None, options: BookieClientOptions | None = None
    ) -> None:
        self._resolver = resolver
        self._options = options or BookieClientOptions()
        self._clients: dict[str, BookieClient] = {}
        self._retired: list[BookieClient] = []
        self._closed = False

    def address_of(self, bookie_id: str) -> str:
        address = self._resolver(bookie_id) if self._resolver is not None else None
        return address or bookie_id

    def get(self, bookie_id: str) -> BookieClient:
        if self._closed:
            raise ClientClosedError("bookie client pool is closed")
        client = self._clients.get(bookie_id)
        if client is not None and not client.closed:
            if self._resolver is None:
                return client
            address = self._resolver(bookie_id)
            if address is None or address == client.address:
                return client
            self._retired.append(client)  # closed at pool close: its calls may still be running
        client = BookieClient(bookie_id, self.address_of(bookie_id), self._options)
        self._clients[bookie_id] = client
        return client

    async def close(self) -> None:
        self._closed = True
        clients = [*self._clients.values(), *self._retired]
        self._clients.clear()
        self._retired.clear()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
