"""The simulation's TCP connections (``tests.sim.tcp``): what the add port's protocols rely on
from a transport, over the simulated network."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.sim.loop import SimLoop
from tests.sim.network import Network
from tests.sim.tcp import DEFAULT_TCP, TIGHT_TCP, SimTransport, TcpProfile, open_tcp
from tests.sim.trace import Trace


class Recorder(asyncio.BufferedProtocol):
    """Keeps what it is told; offers at most ``room`` bytes per read."""

    def __init__(self, room: int = 4096, half_close: bool = False) -> None:
        self.room = room
        self.half_close = half_close
        self.transport: Any = None
        self.received = bytearray()
        self.reads = 0
        self._buffer = bytearray(room)
        self.events: list[str] = []
        self.lost: Exception | str | None = "not yet"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.events.append("made")

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.reads += 1
        self.received += self._buffer[:nbytes]

    def eof_received(self) -> bool:
        self.events.append("eof")
        return self.half_close

    def pause_writing(self) -> None:
        self.events.append("pause_writing")

    def resume_writing(self) -> None:
        self.events.append("resume_writing")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost = exc


def simulate(body: Callable[[Network], Awaitable[None]], seed: int = 1) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        network = Network(loop, random.Random(seed), Trace(clock=lambda: loop.now_us))
        network.server_started("server")
        await body(network)

    with asyncio.Runner(loop_factory=SimLoop) as runner:
        runner.run(main())


async def connected(
    network: Network, client: Recorder, server: Recorder, profile: TcpProfile = DEFAULT_TCP
) -> SimTransport:
    conn = network.connect("client", "server")
    return await open_tcp(conn, client, lambda: (server, lambda: True), profile, random.Random(7))


async def stalled(network: Network, client: Recorder, server: Recorder) -> SimTransport:
    """A connection whose server stopped reading while the client wrote more than the window."""
    transport = await connected(network, client, server, TIGHT_TCP)
    server.transport.pause_reading()
    transport.write(bytes(10_000))
    await asyncio.sleep(1)
    return transport


def test_bytes_arrive_whole_and_in_order_in_segments_of_any_size() -> None:
    client, server = Recorder(), Recorder(room=1000)
    rng = random.Random(3)
    sent = [rng.randbytes(rng.randint(1, 5000)) for _ in range(60)]

    async def body(network: Network) -> None:
        transport = await connected(network, client, server, TIGHT_TCP)
        for data in sent:
            transport.write(data)
        await asyncio.sleep(5)

    simulate(body)
    assert bytes(server.received) == b"".join(sent)
    assert server.reads > 2 * len(sent)  # cut smaller than the writes, not just at the window


def test_a_reader_that_pauses_fills_the_window_then_the_writers_buffer() -> None:
    client, server = Recorder(), Recorder()

    async def body(network: Network) -> None:
        transport = await stalled(network, client, server)
        # a window's worth is on the way, the rest buffered: over the high-water mark
        assert transport.get_write_buffer_size() == 10_000 - TIGHT_TCP.window
        assert client.events == ["made", "pause_writing"]
        assert server.received == b""
        server.transport.resume_reading()
        await asyncio.sleep(1)

    simulate(body)
    assert len(server.received) == 10_000
    assert client.events == ["made", "pause_writing", "resume_writing"]


def test_close_sends_what_is_buffered_then_the_peer_sees_the_end() -> None:
    client, server = Recorder(), Recorder()

    async def body(network: Network) -> None:
        transport = await connected(network, client, server)
        transport.write(b"last words")
        transport.close()
        await asyncio.sleep(1)
        assert not network.connections  # both sides closed: the connection is gone

    simulate(body)
    assert server.received == b"last words"
    assert server.events == ["made", "eof", "lost"] and server.lost is None
    assert client.events == ["made", "lost"] and client.lost is None


def test_writing_to_a_side_closed_for_good_resets_the_connection() -> None:
    client, server = Recorder(), Recorder(half_close=True)  # the server keeps writing after EOF

    async def body(network: Network) -> None:
        await connected(network, client, server)
        client.transport.close()
        await asyncio.sleep(1)
        assert server.events == ["made", "eof"]
        server.transport.write(b"an answer nobody reads")
        await asyncio.sleep(1)

    simulate(body)
    assert server.events == ["made", "eof", "lost"]
    assert isinstance(server.lost, ConnectionResetError)


def test_an_abort_ends_the_peer_with_a_fin_or_with_an_rst_if_it_left_bytes_unread() -> None:
    async def body(network: Network) -> None:
        client, server = Recorder(), Recorder()
        await connected(network, client, server)
        server.transport.abort()  # nothing unread: a FIN
        await asyncio.sleep(1)
        assert server.events == ["made", "lost"] and server.lost is None
        assert client.events == ["made", "eof", "lost"] and client.lost is None

        client, server = Recorder(), Recorder()
        await connected(network, client, server)
        server.transport.pause_reading()
        client.transport.write(b"a request")
        await asyncio.sleep(1)
        server.transport.abort()  # the request unread: an RST
        await asyncio.sleep(1)
        assert server.lost is None and isinstance(client.lost, ConnectionResetError)
        assert "eof" not in client.events

    simulate(body)


def test_a_crashed_server_resets_its_connections_and_refuses_new_ones() -> None:
    async def body(network: Network) -> None:
        client, server = Recorder(), Recorder()
        await connected(network, client, server)
        network.server_crashed("server", host_down=False)
        await asyncio.sleep(1)
        assert isinstance(client.lost, ConnectionResetError)
        with pytest.raises(ConnectionRefusedError):
            await connected(network, Recorder(), Recorder())

    simulate(body)


def test_a_close_with_bytes_left_unread_resets_a_peer_that_waits_to_write() -> None:
    """The peer's window would never open again: a socket closed with unread bytes sends an RST."""
    client, server = Recorder(), Recorder()

    async def body(network: Network) -> None:
        await stalled(network, client, server)
        server.transport.close()
        await asyncio.sleep(1)

    simulate(body)
    assert isinstance(client.lost, ConnectionResetError)
    assert not server.received
