"""One connection per bookie: a grpc.aio channel, the coalescing add stream (``add_stream``) over
the bookie's add port when it has one (``add_port_call``) or else over gRPC, the read stream
(``read_stream``) and unary calls. gRPC errors never leave this module untranslated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from bkproto.errors import BKError, ClientClosedError, UnauthorizedAccessError, error_for_status
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

from .add_port_call import READ_STREAM, AddPortCall, AddPortOutage
from .add_stream import AddRequestEncoder, AddStream, CallbackListener
from .frame_reader import FrameConnector, open_frame_connection
from .grpc_add_call import GrpcAddCall
from .read_stream import ReadStream, StandingPoll
from .refused_bookie import RefusedBookie
from .rpc_errors import translate_rpc_error
from .tls import ClientSecurity
from .transport import (
    AddCallback,
    AddListener,
    BookieAddress,
    BookieConnection,
    BookieConnector,
    DiskInfo,
    ReadResult,
    StandingStridePoll,
    StrideResult,
)

__all__ = [
    "AddCallback",
    "AddListener",
    "AddRequestEncoder",
    "BookieClient",
    "BookieClientOptions",
    "DiskInfo",
    "ReadResult",
    "StrideResult",
    "grpc_connector",
]

EOK = bookie_pb2.EOK
ENOENTRY = bookie_pb2.ENOENTRY
MiB = 1024 * 1024
# Room for a 5 MiB entry plus framing; BookKeeper's nettyMaxFrameSizeBytes is 5 MiB.
MAX_MESSAGE_BYTES = 16 * MiB


@dataclass(frozen=True, slots=True)
class BookieClientOptions:
    """Connection tuning. Defaults suit a few bookies on one host as well as a real cluster."""

    max_inflight_messages: int = 1  # add-stream messages awaiting a response while the bookie is behind
    max_inflight_messages_keeping_up: int = 2  # ... while it keeps up
    min_batch_interval_s: float = 0.0  # while the bookie is behind: at most one message per interval
    behind_min_adds: int = 16  # "behind": this many adds queued during the last round trip
    max_batch_bytes: int = 4 * MiB  # bodies per add-stream message, kept under MAX_MESSAGE_BYTES
    default_timeout_s: float = 10.0  # unary calls without an explicit timeout
    use_add_port: bool = True  # adds (and tails) over the bookie's add port when it has one (else gRPC)
    security: ClientSecurity | None = None  # TLS and credentials for every connection (None: plaintext)


class BookieClient:
    """The client side of one bookie over gRPC and its add port: the production
    :class:`bkclient.transport.BookieConnection`. Create and use it on the event loop that will
    run it."""

    def __init__(
        self,
        bookie_id: str,
        address: str,
        options: BookieClientOptions | None = None,
        add_address: str | None = None,
        add_port_reads: bool = False,
    ) -> None:
        """``address`` is the gRPC target; ``add_address`` the add port's, if the bookie has one,
        and ``add_port_reads`` whether that port serves the ReadStream too."""
        self.bookie_id = bookie_id
        self.address = address
        self.add_address = add_address
        self.add_port_reads = add_port_reads
        self._stream_batches = True  # until the bookie shows it does not serve read_entries there
        self.options = options or BookieClientOptions()
        security = self.options.security
        self._channel = _channel(
            address,
            security,
            [
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
        self._add_entries_call: Any = self._channel.stream_stream(
            "/bkproto.v1.Bookie/AddEntries",
            request_serializer=None,
            response_deserializer=bookie_pb2.AddEntriesResponse.FromString,
        )
        self._read_stream_call: Any = self._channel.stream_stream(
            "/bkproto.v1.Bookie/ReadStream",
            request_serializer=None,  # ReadStream serializes (the add port's call takes bytes too)
            response_deserializer=bookie_pb2.ReadStreamResponse.FromString,
        )
        self._stream: AddStream | None = None
        self._add_port_outage = AddPortOutage()  # shared by the add streams: one warning per outage
        self._open_frames: FrameConnector = open_frame_connection  # the add port's connections
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
        self.add_encoded(encoded, CallbackListener(callback), 0)

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        """Queue an add already serialized by :class:`AddRequestEncoder` (the hot path: the
        write handle encodes an entry once for all bookies of its write set). Its completion
        calls ``listener.add_complete(self.bookie_id, token, error or None)`` on the loop."""
        stream = self._add_stream(listener, (token,))
        if stream is not None:
            stream.enqueue(encoded, listener, token)

    def add_bodies(
        self,
        packer: AddRequestEncoder,
        bodies: Sequence[bytes],
        listener: AddListener,
        entry_ids: Sequence[int],
    ) -> None:
        """Queue entries of ``packer``'s ledger given as their bodies (see
        :meth:`bkclient.transport.BookieConnection.add_bodies`): a stream message packs them."""
        stream = self._add_stream(listener, entry_ids)
        if stream is not None:
            stream.enqueue_bodies(packer, bodies, listener, entry_ids)

    def _add_stream(self, listener: AddListener, tokens: Sequence[int]) -> AddStream | None:
        """The add stream, opened if there is none; None once the client is closed, the adds of
        ``tokens`` then failed with ClientClosedError."""
        if self._closed:
            error = ClientClosedError(f"bookie client {self.bookie_id} is closed")
            for token in tokens:
                listener.add_complete(self.bookie_id, token, error)
            return None
        stream = self._stream
        return stream if stream is not None else self._open_stream()

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

    def _add_entries(self) -> GrpcAddCall:
        return GrpcAddCall(self._add_entries_call())

    def _open_stream(self) -> AddStream:
        call: Any
        if self.add_address is not None and self.options.use_add_port:
            call = AddPortCall(
                self.bookie_id, self.add_address, self._add_entries, self._add_port_outage,
                self.options.security, connect=self._open_frames,
            )
        else:
            call = self._add_entries()
        self._stream = AddStream(self.bookie_id, self.options, call, self._stream_failed)
        self.streams_opened += 1
        return self._stream

    def _stream_failed(self, stream: AddStream) -> None:
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

    @property
    def _port_serves_reads(self) -> bool:
        """Whether the ReadStream goes over the bookie's add port (its registration says the port
        serves it, and the options allow the port)."""
        return self.add_address is not None and self.add_port_reads and self.options.use_add_port

    def _reads(self) -> ReadStream:
        if self._closed:
            raise ClientClosedError(f"bookie client {self.bookie_id} is closed")
        stream = self._read_stream
        if stream is None or stream.failed:
            call: Any
            if self._port_serves_reads and self.add_address is not None:
                call = AddPortCall(
                    self.bookie_id, self.add_address, self._read_stream_call, self._add_port_outage,
                    self.options.security, READ_STREAM, self._open_frames,
                )
            else:
                call = self._read_stream_call()
            stream = self._read_stream = ReadStream(self.bookie_id, call)
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

    def standing_stride_poll(
        self,
        ledger_id: int,
        first: int,
        stride: int,
        max_count: int,
        max_bytes: int,
        long_poll_timeout_ms: int,
    ) -> StandingStridePoll:
        """A stride poll that keeps answering (see StridePollRequest): parked until the bookie's
        LAC reaches ``first``, answered with the confirmed entries ``first``, ``first + stride``,
        ... it holds, then again from where that answer ended, up to ``max_count`` entries; each
        answer but the last has ``more``. A timeout, or a LAC past the next entry on a bookie
        without it, is a last answer without entries and with the bookie's LAC."""
        request = bookie_pb2.StridePollRequest(
            ledger_id=ledger_id,
            first_entry_id=first,
            stride=stride,
            max_count=max_count,
            max_bytes=max_bytes,
            timeout_ms=long_poll_timeout_ms,
        )
        timeout_s = long_poll_timeout_ms / 1000.0 + self.options.default_timeout_s
        return _StandingStridePoll(self.bookie_id, self._reads().stand(request), timeout_s)

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
        if self._port_serves_reads and self._stream_batches:
            # Over the read stream on the add port: a gRPC call's send and receive of a 1 MiB
            # answer cost each side more than the answer's entries do.
            timeout_s = timeout or self.options.default_timeout_s
            answer = await self._reads().request(timeout_s, read_entries=request)
            if answer.HasField("read_entries"):
                batch = answer.read_entries
                if batch.status != EOK:
                    raise error_for_status(batch.status, f"bookie {self.bookie_id}: {batch.message}")
                return list(batch.bodies)
            # A bookie from before read_entries on the stream refused it as asking for nothing.
            self._stream_batches = False
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

    async def get_bookie_info(self, *, timeout: float | None = None) -> DiskInfo:  # noqa: ASYNC109 - the gRPC deadline
        """The bookie's total disk capacity and free disk space."""
        request = bookie_pb2.GetBookieInfoRequest(
            requested=bookie_pb2.TOTAL_DISK_CAPACITY | bookie_pb2.FREE_DISK_SPACE
        )
        response = await self._unary(self._stub.GetBookieInfo, request, timeout)
        return DiskInfo(response.total_disk_capacity, response.free_disk_space)

    async def list_entries(self, ledger_id: int, *, timeout: float | None = None) -> list[tuple[int, int]]:  # noqa: ASYNC109 - the gRPC deadline
        """The entry ids this bookie can serve, as sorted inclusive runs (GetListOfEntriesOfLedger);
        NoSuchLedgerError when it holds none."""
        request = bookie_pb2.GetListOfEntriesOfLedgerRequest(ledger_id=ledger_id)
        response = await self._unary(self._stub.GetListOfEntriesOfLedger, request, timeout)
        return [(r.first, r.last) for r in response.ranges]

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


def _channel(
    address: str, security: ClientSecurity | None, options: list[tuple[str, Any]]
) -> grpc.aio.Channel:
    if security is None or not security.tls:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, security.grpc_credentials(), options=options)


def _stride_result(bookie_id: str, response: bookie_pb2.StridePollResponse) -> StrideResult:
    if response.status == ENOENTRY:
        return StrideResult([], response.max_lac)
    if response.status != EOK:
        raise error_for_status(response.status, f"bookie {bookie_id}: {response.message}")
    return StrideResult(list(response.bodies), response.max_lac, response.more)


class _StandingStridePoll:
    """:class:`bkclient.transport.StandingStridePoll` over a bookie's ReadStream."""

    def __init__(self, bookie_id: str, poll: StandingPoll, timeout_s: float) -> None:
        self._bookie_id = bookie_id
        self._poll = poll
        self._timeout_s = timeout_s

    async def next(self) -> StrideResult:
        return _stride_result(self._bookie_id, await self._poll.next(self._timeout_s))

    def cancel(self) -> None:
        self._poll.cancel()


def grpc_connector(options: BookieClientOptions | None = None) -> BookieConnector:
    """Opens :class:`BookieClient` connections (gRPC, and the add port when the bookie has one).
    A bookie registered as TLS-only, for a client without TLS, gets a :class:`RefusedBookie`
    saying so: connecting in plaintext would only fail as an unreachable bookie."""
    tls = options is not None and options.security is not None and options.security.tls

    def connect(bookie_id: str, address: BookieAddress) -> BookieConnection:
        if address.tls and not tls:
            return RefusedBookie(bookie_id, UnauthorizedAccessError(
                f"bookie {bookie_id} accepts only TLS (its registration says so) and this client has"
                " no TLS configured: set clientTrustStore (and a client certificate or token), e.g."
                " through PYBK_CLIENT_CONF"
            ))  # fmt: skip
        return BookieClient(bookie_id, address.grpc, options, address.add, address.add_reads)

    return connect

