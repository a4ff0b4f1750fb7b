"""The real ``BookieClient`` over the simulated network, through the client's connector seam.

:class:`SimBookieClient` is ``bkclient.bookie_client.BookieClient`` (the gRPC implementation of
``bkclient.transport.BookieConnection``) with only its gRPC channel swapped: every method of the
real class (the coalescing ``AddStream``, the multiplexed ``ReadStream``, unary calls, status and
error translation) runs unchanged; the stub, the two stream factories and the channel are
simulated. Requests and responses cross the network serialized, as real protobuf bytes, and reach
the bookie node's real gRPC handlers. Failures surface as gRPC's own ``AioRpcError``
(UNAVAILABLE on a reset, DEADLINE_EXCEEDED at the deadline), which the real client translates.
With ``use_add_port`` in its options, the client's add and read streams go over the bookie's add
port instead, as in production: the real ``AddPortCall`` and ``FrameReader`` over a simulated TCP
connection (``tests.sim.tcp``), falling back to the simulated gRPC stream when it cannot connect
or the port closes the connection before answering.
:func:`sim_connector` is the ``BookieConnector`` the client's pool opens them with.
"""

from __future__ import annotations

import asyncio
import builtins
import random
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc
import grpc.aio

from bkclient.add_port_call import AddPortOutage
from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkclient.frame_reader import FrameConnector, FrameReader
from bkclient.transport import BookieAddress, BookieConnection, BookieConnector
from bkproto.v1 import bookie_pb2

from .network import Connection, Network
from .tcp import Serving, TcpProfile, open_tcp

if TYPE_CHECKING:
    from .bookie_node import BookieNode

NodeLookup = Callable[[str], "BookieNode | None"]

# Unary methods: name -> response type.
UNARY: dict[str, Any] = {
    "ReadEntry": bookie_pb2.ReadResponse,
    "ReadEntries": bookie_pb2.ReadEntriesResponse,
    "ReadLac": bookie_pb2.ReadLacResponse,
    "WriteLac": bookie_pb2.WriteLacResponse,
    "ForceLedger": bookie_pb2.ForceLedgerResponse,
    "GetBookieInfo": bookie_pb2.GetBookieInfoResponse,
}


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


class SimChannel:
    """One client's channel to one bookie: like gRPC's, it reconnects on the next call after a reset."""

    def __init__(self, network: Network, client: str, server: str, lookup: NodeLookup) -> None:
        self.network = network
        self.client = client
        self.server = server
        self.lookup = lookup
        self._conn: Connection | None = None
        self.closed = False

    def connection(self) -> Connection:
        if self.closed:
            raise rpc_error(grpc.StatusCode.CANCELLED, "channel closed")
        if self._conn is None or not self._conn.alive:
            self._conn = self.network.connect(self.client, self.server)
        return self._conn

    def node_for(self, conn: Connection) -> BookieNode | None:
        """The server incarnation this connection reaches, if it is still the one running."""
        node = self.lookup(self.server)
        if node is None or not node.up or node.epoch != conn.epoch:
            return None
        return node

    async def close(self, grace: float | None = None) -> None:
        self.closed = True
        if self._conn is not None:
            self._conn.reset("channel closed")


class SimUnary:
    def __init__(self, channel: SimChannel, method: str) -> None:
        self._channel = channel
        self._method = method
        self._decode = UNARY[method].FromString

    async def __call__(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - the gRPC deadline
        channel = self._channel
        conn = channel.connection()
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        data = request.SerializeToString()

        cancels: list[Callable[[], None]] = []  # the call on the bookie, once it arrived

        def fail() -> None:
            if not answer.done():
                answer.set_exception(rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset"))

        def reply(response: bytes, delivered: Callable[[], None]) -> None:
            def arrive_back() -> None:
                delivered()
                if not answer.done():
                    answer.set_result(response)

            conn.send(False, arrive_back, f"{self._method} reply")

        def arrive() -> None:
            node = channel.node_for(conn)
            if node is not None:
                cancels.append(node.serve_unary(conn, self._method, data, reply))

        def cancel_on_bookie() -> None:
            """The client gave up (deadline, or its caller cancelled): gRPC tells the bookie."""
            conn.send(True, lambda: [cancel() for cancel in cancels], f"{self._method} cancel")

        conn.on_reset(fail)
        conn.send(True, arrive, self._method)
        try:
            return self._decode(await asyncio.wait_for(answer, timeout))
        except builtins.TimeoutError:
            cancel_on_bookie()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded") from None
        except asyncio.CancelledError:
            cancel_on_bookie()
            raise


class _Eof:
    pass


class SimStreamCall:
    """The client end of one bidi stream (``write``/``read``/``cancel``, like grpc.aio's call)."""

    def __init__(self, channel: SimChannel, method: str, decode: Callable[[bytes], Any]) -> None:
        self._channel = channel
        self._method = method
        self._decode = decode
        self._conn = conn = channel.connection()
        self._responses: asyncio.Queue[bytes | _Eof | grpc.aio.AioRpcError] = asyncio.Queue()
        self._server_end: Any = None
        self._done = False
        conn.on_reset(self._reset)
        conn.send(True, self._open_on_server, f"{method} open")

    def _open_on_server(self) -> None:
        node = self._channel.node_for(self._conn)
        if node is not None and not self._done:
            self._server_end = node.open_stream(self._conn, self._method, self._from_server)

    def _from_server(self, item: bytes | None) -> None:
        """Called on the server side: a response (bytes) or the end of the stream (None)."""
        value: bytes | _Eof = _Eof() if item is None else item
        self._conn.send(False, lambda: self._responses.put_nowait(value), f"{self._method} response")

    def _reset(self) -> None:
        self._done = True
        self._responses.put_nowait(rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset"))

    async def write(self, message: bytes | Any) -> None:
        if self._done:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "stream is closed")
        self.write_nowait(message)

    def ready_to_write(self) -> bool:
        """As the add port's call: a write never waits here, so the client's add stream may send
        in the enqueuer's step (its fast path for a lone add) while the stream is open."""
        return not self._done

    def write_nowait(self, message: bytes | Any) -> None:
        data = message if isinstance(message, bytes) else message.SerializeToString()

        def arrive() -> None:
            if self._server_end is not None:
                self._server_end.push(data)

        self._conn.send(True, arrive, self._method)

    async def read(self) -> Any:
        item = await self._responses.get()
        if isinstance(item, _Eof):
            return grpc.aio.EOF  # type: ignore[attr-defined]
        if isinstance(item, grpc.aio.AioRpcError):
            self._responses.put_nowait(item)  # every later read fails the same way
            raise item
        return self._decode(item)

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True

        def arrive() -> None:
            if self._server_end is not None:
                self._server_end.cancel()

        self._conn.send(True, arrive, f"{self._method} cancel")
        return True


class _SimStub:
    def __init__(self, channel: SimChannel) -> None:
        for method in UNARY:
            setattr(self, method, SimUnary(channel, method))


class SimBookieClient(BookieClient):
    """``BookieClient`` whose channel, stub and stream calls are simulated (see the module doc)."""

    def __init__(
        self, bookie_id: str, options: BookieClientOptions, channel: SimChannel, tcp: SimTcp | None = None
    ) -> None:
        """``tcp``: how the add port's connections behave (None: the bookie has no add port)."""
        # Not BookieClient.__init__: it would open a real grpc.aio channel. These are the
        # attributes it sets, with simulated transport objects.
        self.bookie_id = bookie_id
        self.address = bookie_id
        self.add_address = bookie_id if tcp is not None else None  # host:port, as registered
        self.add_port_reads = tcp is not None
        self._stream_batches = True
        self.options = options
        self._channel = channel  # type: ignore[assignment]
        self._stub = _SimStub(channel)
        self._add_entries = lambda: SimStreamCall(
            channel, "AddEntries", bookie_pb2.AddEntriesResponse.FromString
        )
        self._read_stream_call = lambda: SimStreamCall(
            channel, "ReadStream", bookie_pb2.ReadStreamResponse.FromString
        )
        self._stream = None
        self._add_port_outage = AddPortOutage()
        self._open_frames = _frame_connector(channel, tcp) if tcp is not None else _no_add_port
        self._read_stream = None
        self._closed = False
        self.streams_opened = 0


class SimTcp(NamedTuple):
    """How the add port's connections behave: their window and buffers, and where the random
    sizes of their segments come from."""

    profile: TcpProfile
    rng: random.Random


def _frame_connector(channel: SimChannel, tcp: SimTcp) -> FrameConnector:
    """The ``AddPortCall``'s connector: a new simulated TCP connection to the channel's bookie."""

    async def open_frames(
        host: str, port: int, tls: ssl.SSLContext | None
    ) -> tuple[FrameReader, asyncio.StreamWriter]:
        conn = channel.network.connect(channel.client, channel.server)

        def accept() -> tuple[asyncio.BufferedProtocol, Serving] | None:
            node = channel.node_for(conn)
            return None if node is None else node.accept_add_port(conn)

        reader = FrameReader()
        transport = await open_tcp(conn, reader, accept, tcp.profile, tcp.rng)
        return reader, asyncio.StreamWriter(transport, reader, None, asyncio.get_running_loop())

    return open_frames


async def _no_add_port(
    host: str, port: int, tls: ssl.SSLContext | None
) -> tuple[FrameReader, asyncio.StreamWriter]:
    raise AssertionError("the simulated bookie client has no add port address")


def sim_connector(
    network: Network, client: str, lookup: NodeLookup, options: BookieClientOptions, tcp: SimTcp | None = None
) -> BookieConnector:
    """The client's ``BookieConnector``: a simulated connection from ``client`` per bookie id
    (addresses are not needed: the network routes by bookie id); ``tcp``: the add port's
    connections, when ``options.use_add_port``."""

    def connect(bookie_id: str, address: BookieAddress) -> BookieConnection:
        channel = SimChannel(network, client, bookie_id, lookup)
        return SimBookieClient(bookie_id, options, channel, tcp if options.use_add_port else None)

    return connect
