"""The verify fault proxy over a local echo server: it forwards, cuts every link on a partition,
refuses new ones while it lasts, forwards again when healed, and still delivers when slow."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from pybk.verify.proxy import FaultProxy


@contextlib.asynccontextmanager
async def echo_through_proxy() -> AsyncIterator[FaultProxy]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = FaultProxy("test", ("127.0.0.1", 0), ("127.0.0.1", port))
    await proxy.start()
    assert proxy._server is not None
    proxy.listen = ("127.0.0.1", proxy._server.sockets[0].getsockname()[1])
    try:
        yield proxy
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()


async def round_trip(proxy: FaultProxy, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*proxy.listen)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(data)), 10)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_forwards_cuts_refuses_and_heals() -> None:
    async with echo_through_proxy() as proxy:
        assert await round_trip(proxy, b"hello") == b"hello"
        reader, writer = await asyncio.open_connection(*proxy.listen)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        proxy.set_partition()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the open link is cut
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await round_trip(proxy, b"refused")
        proxy.set_pass()
        assert await round_trip(proxy, b"again") == b"again"


async def test_a_slow_link_still_delivers_everything_in_order() -> None:
    async with echo_through_proxy() as proxy:
        proxy.set_slow(0.01)
        data = bytes(range(256)) * 64
        assert await round_trip(proxy, data) == data
