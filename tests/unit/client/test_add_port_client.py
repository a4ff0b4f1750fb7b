"""A bookie client sending adds over the add port of a real loopback bookie service (in-memory
core), and falling back to gRPC when that port cannot be reached, or closes its connections
before answering."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from tests.sim.loop import SimLoop
from tests.sim.network import Network
from tests.sim.tcp import TIGHT_TCP, open_tcp
from tests.sim.trace import Trace
from tests.support.add_requests import fake_entry
from tests.support.fake_bookie_core import FakeBookieCore

from bkclient.add_port_call import AddPortCall
from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkclient.frame_reader import FrameReader
from bkmeta.zookeeper_server import free_port
from bkproto.errors import BKError, BookieUnavailableError, UnauthorizedAccessError
from bookie.limits import ListenerLimits
from bookie.service import BookieService
from bookie.stats import RequestStats

pytestmark = pytest.mark.both_loops  # the add port's protocols on both loops (tests.support.event_loops)

KEY = b"k" * 20


@pytest.fixture
async def service() -> AsyncIterator[tuple[BookieService, FakeBookieCore]]:
    core = FakeBookieCore()
    service = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, add_port=0)
    await service.start()
    yield service, core
    await service.stop(0)


async def test_adds_go_over_the_add_port(service: tuple[BookieService, FakeBookieCore]) -> None:
    bookie, core = service
    client = BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=f"127.0.0.1:{bookie.add_port}")
    try:
        await asyncio.gather(*(client.add(1, e, KEY, fake_entry(1, e)) for e in range(20)))
        assert bookie.add_port_connections == 1
        assert sorted(core.ledgers[1].entries) == list(range(20))
        with pytest.raises(UnauthorizedAccessError):  # per-add statuses come back as over gRPC
            await client.add(1, 20, b"w" * 20, fake_entry(1, 20))
    finally:
        await client.close()
    await asyncio.sleep(0.1)
    assert bookie.add_port_connections == 0  # closing the client closed its connection


async def test_unreachable_add_port_falls_back_to_grpc(
    service: tuple[BookieService, FakeBookieCore], caplog: pytest.LogCaptureFixture
) -> None:
    bookie, core = service
    closed = f"127.0.0.1:{free_port()}"
    client = BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=closed)
    try:
        await asyncio.gather(*(client.add(2, e, KEY, fake_entry(2, e)) for e in range(5)))
    finally:
        await client.close()
    assert sorted(core.ledgers[2].entries) == list(range(5))
    assert bookie.add_port_connections == 0
    assert any(f"add port {closed} unreachable" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING), caplog.text


@pytest.mark.parametrize("ending", ["FIN", "RST"])
async def test_an_add_port_that_closes_before_answering_sends_the_stream_over_grpc(
    service: tuple[BookieService, FakeBookieCore], caplog: pytest.LogCaptureFixture, ending: str
) -> None:
    """A proxy or firewall that accepts the add port's connections and closes them: the adds
    written so far are sent again over gRPC, and the later ones go there too."""
    bookie, core = service
    got = asyncio.Event()

    async def close_once_requests_came(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)  # the preface and the first requests
        got.set()
        await asyncio.sleep(0.05)  # more requests on the way
        if ending == "RST":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()

    closing = await asyncio.start_server(close_once_requests_came, "127.0.0.1", 0)
    target = f"127.0.0.1:{closing.sockets[0].getsockname()[1]}"
    client = BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=target)
    try:
        first = [client.add(6, e, KEY, fake_entry(6, e)) for e in range(10)]
        adding = asyncio.gather(*first)
        await got.wait()
        later = [client.add(6, e, KEY, fake_entry(6, e)) for e in range(10, 20)]
        await asyncio.wait_for(asyncio.gather(adding, *later), 10)
        assert client.streams_opened == 1  # the same stream, carried on over gRPC
        await client.add(6, 20, KEY, fake_entry(6, 20))
    finally:
        await client.close()
        closing.close()
    assert sorted(core.ledgers[6].entries) == list(range(21))
    assert any("closed the connection before answering" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING), caplog.text


async def test_a_bookie_at_its_add_port_connections_per_ip_keeps_taking_adds_over_grpc() -> None:
    core = FakeBookieCore()
    limits = ListenerLimits(max_connections_per_peer=1)
    bookie = BookieService(
        core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, add_port=0, listener_limits=limits
    )
    await bookie.start()
    clients = [
        BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=f"127.0.0.1:{bookie.add_port}")
        for _ in range(2)
    ]
    try:
        await clients[0].add(7, 0, KEY, fake_entry(7, 0))
        assert bookie.add_port_connections == 1  # the one this address may have
        await asyncio.wait_for(
            asyncio.gather(*(clients[1].add(7, e, KEY, fake_entry(7, e)) for e in range(1, 11))), 10
        )
        assert bookie.add_port_connections == 1
        await clients[0].add(7, 11, KEY, fake_entry(7, 11))
    finally:
        for client in clients:
            await client.close()
        await bookie.stop(0)
    assert sorted(core.ledgers[7].entries) == list(range(12))


async def test_add_port_can_be_turned_off_on_the_client(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    bookie, core = service
    client = BookieClient(
        "b", f"127.0.0.1:{bookie.port}", BookieClientOptions(use_add_port=False),
        add_address=f"127.0.0.1:{bookie.add_port}",
    )
    try:
        await client.add(3, 0, KEY, fake_entry(3, 0))
        assert bookie.add_port_connections == 0
        assert core.ledgers[3].entries[0] == fake_entry(3, 0)
    finally:
        await client.close()


async def test_a_stopped_bookie_fails_adds_instead_of_holding_them() -> None:
    core = FakeBookieCore()
    bookie = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, add_port=0)
    await bookie.start()
    client = BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=f"127.0.0.1:{bookie.add_port}")
    try:
        await client.add(4, 0, KEY, fake_entry(4, 0))
        await bookie.stop(1)
        with pytest.raises(BookieUnavailableError):
            await asyncio.wait_for(client.add(4, 1, KEY, fake_entry(4, 1)), 10)
    finally:
        await client.close()


async def test_an_unreachable_add_port_is_reported_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    core = FakeBookieCore()
    port, add_port = free_port(), free_port()

    async def serve() -> BookieService:
        service = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", port, add_port=add_port)
        await service.start()
        return service

    def warnings() -> int:
        return sum(1 for r in caplog.records
                   if r.levelno == logging.WARNING and "unreachable" in r.getMessage())

    async def fail_adds(first: int, count: int) -> None:
        """Adds to the stopped bookie: each one opens a new stream, so tries the add port again."""
        for entry_id in range(first, first + count):
            with pytest.raises(BKError):
                await asyncio.wait_for(client.add(5, entry_id, KEY, fake_entry(5, entry_id)), 10)

    bookie = await serve()
    client = BookieClient("b", f"127.0.0.1:{port}", add_address=f"127.0.0.1:{add_port}")
    try:
        await client.add(5, 0, KEY, fake_entry(5, 0))
        await bookie.stop(0)
        streams = client.streams_opened
        await fail_adds(1, 4)
        assert client.streams_opened - streams == 4  # four connection attempts...
        assert warnings() == 1  # ...one warning
        bookie = await serve()  # back: the next stream reaches the add port
        for _ in range(100):  # gRPC's reconnect backoff may fail the first adds
            try:
                await client.add(5, 10, KEY, fake_entry(5, 10))
                break
            except BKError:
                await asyncio.sleep(0.1)
        assert bookie.add_port_connections == 1
        await bookie.stop(0)  # a second outage is reported again
        await fail_adds(11, 3)
        assert warnings() == 2
    finally:
        await client.close()
        await bookie.stop(0)


async def test_a_lone_add_leaves_in_the_callers_step_and_acks_stay_in_order(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    """While the stream's sender is parked with nothing queued and the socket takes data, an add
    is written in its caller's own step (no sender task turn per message); its answer completes it
    as before."""
    bookie, core = service
    client = BookieClient("b", f"127.0.0.1:{bookie.port}", add_address=f"127.0.0.1:{bookie.add_port}")
    try:
        await client.add(8, 0, KEY, fake_entry(8, 0))  # opens the connection
        stream = client._stream
        assert stream is not None
        for entry_id in range(1, 6):
            sent = stream.messages_sent
            future = client.add(8, entry_id, KEY, fake_entry(8, entry_id))
            assert stream.messages_sent == sent + 1  # written before this step yields
            await future
        with pytest.raises(UnauthorizedAccessError):  # a refused add's status comes back as before
            await client.add(8, 6, b"w" * 20, fake_entry(8, 6))
        assert sorted(core.ledgers[8].entries) == list(range(6))
    finally:
        await client.close()


async def test_a_reset_connection_leaves_no_error_for_asyncio_to_report() -> None:
    """A bookie that resets the add port's connection fails the read with that error, and the
    connection's close future is left with no error of its own for the garbage collector to log as
    "Future exception was never retrieved" (seen in a fault run's client log when asyncio's stream
    protocol kept a copy there)."""

    async def reset_after_the_preface(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        writer.transport.abort()

    server = await asyncio.start_server(reset_after_the_preface, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    call = AddPortCall("bookie-1", f"127.0.0.1:{port}", None)
    try:
        with pytest.raises(ConnectionResetError):
            await call.read()
        protocol = call._writer._protocol  # type: ignore[union-attr]  # asyncio's, no public handle
        closed = protocol._closed
        assert closed.done()
        assert not closed._log_traceback  # nothing left for the collector to report
    finally:
        call.cancel()
        server.close()


async def test_a_reset_connection_fails_an_unframed_write_and_leaves_no_error_for_asyncio() -> None:
    """``write`` (what ``pybk bench bookie`` sends with) handles a reset as ``write_framed`` does."""
    reset = asyncio.Event()

    async def reset_after_the_preface(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        reset.set()

    server = await asyncio.start_server(reset_after_the_preface, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    call = AddPortCall("bookie-1", f"127.0.0.1:{port}", None)
    try:
        await call.write(b"first")
        await reset.wait()
        with pytest.raises(OSError):
            for _ in range(1000):  # the kernel reports the reset on a later send
                await call.write(b"x" * 65536)
                await asyncio.sleep(0.001)
        closed = call._writer._protocol._closed  # type: ignore[union-attr]
        assert closed.done()
        assert not closed._log_traceback
    finally:
        call.cancel()
        server.close()


class _RecordingGrpcCall:
    """A gRPC stream call that takes what is written and answers nothing."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.cancelled = False

    async def write(self, message: bytes) -> None:
        self.written.append(message)

    async def read(self) -> object:
        await asyncio.Event().wait()  # no answer: only what was sent over gRPC matters here

    def cancel(self) -> None:
        self.cancelled = True


def test_a_write_waiting_for_room_goes_over_grpc_when_the_add_port_ends_before_answering() -> None:
    """The add port's peer sends its FIN and is gone (a vanished host): the socket never drains
    and no reset comes. The stream falls back on the end of stream, and the write that waited for
    room must not go on waiting: it goes over gRPC, after the requests sent before it."""
    grpc_call = _RecordingGrpcCall()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        network = Network(loop, random.Random(1), Trace(clock=lambda: 0))
        network.server_started("bookie")
        server = FrameReader()  # any protocol: it never reads

        async def connect(host: str, port: int, tls: object) -> tuple[FrameReader, asyncio.StreamWriter]:
            reader = FrameReader()
            conn = network.connect("client", "bookie")
            accept = lambda: (server, lambda: True)  # noqa: E731
            transport = await open_tcp(conn, reader, accept, TIGHT_TCP, random.Random(2))
            return reader, asyncio.StreamWriter(transport, reader, None, loop)

        call = AddPortCall("b", "bookie:1", lambda: grpc_call, connect=connect)
        await call.write(b"first")
        server._transport.pause_reading()  # type: ignore[union-attr]
        writing = asyncio.ensure_future(call.write(b"x" * 5000))  # past the window: waits for room
        await asyncio.sleep(1)
        assert not writing.done()
        call._writer.transport._arrive_eof()  # type: ignore[union-attr]  # the peer's FIN, then silence
        reading = asyncio.ensure_future(call.read())
        await asyncio.wait_for(writing, 30)
        assert grpc_call.written == [b"first", b"x" * 5000]
        reading.cancel()
        call.cancel()

    with asyncio.Runner(loop_factory=SimLoop) as runner:
        runner.run(main())
