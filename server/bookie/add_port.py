"""The bookie's add port: the AddEntries stream over plain TCP (format and why: ``bkproto.add_port``).

Each connection is one add stream served by the same :class:`AddEntriesHandler` as the gRPC
method, so pipelining, the stream window, the in-progress byte budget and shutdown draining are
shared, not duplicated. Backpressure is TCP's own: a stream at its window stops reading its
socket, and answers are written only as fast as the client takes them (``drain``).

A connection that breaks the format (wrong preface, oversized frame, a message that does not
parse) is closed with a warning naming the peer and the fault; other connections carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from google.protobuf.message import DecodeError

from bkproto.add_port import FrameError, frame, keep_alive, read_frame, read_preface
from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest, parse_add_entries
from bookie.stats import RequestStats

log = logging.getLogger(__name__)

# A connection must say what it is this soon, or it is closed: idle sockets must not pile up.
PREFACE_TIMEOUT_S = 10.0


class AddPortServer:
    """Listens on the add port. ``start()`` binds and serves; ``stop_accepting()`` then
    ``close()`` end it (the handler's own drain answers the started batches in between)."""

    def __init__(self, handler: AddEntriesHandler, stats: RequestStats, bind_address: str, port: int) -> None:
        self._handler = handler
        self._bind_address = bind_address
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        stats.add_port_connections = lambda: self.open_connections  # read by metrics scrapes

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        target = f"{self._bind_address}:{self._requested_port}"
        try:
            self._server = await asyncio.start_server(self._serve, self._bind_address, self._requested_port)
        except OSError as exc:
            raise OSError(f"cannot listen on {target} (add port): {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop listening and close every connection still open."""
        self.stop_accepting()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        keep_alive(writer.get_extra_info("socket"))
        try:
            try:
                await asyncio.wait_for(read_preface(reader), PREFACE_TIMEOUT_S)
            except TimeoutError:
                raise FrameError(f"no preface within {PREFACE_TIMEOUT_S:g} s") from None
            responses = self._handler.serve(_requests(reader, peer))
            async with contextlib.aclosing(responses):
                async for response in responses:
                    writer.write(frame(response.SerializeToString()))
                    await writer.drain()
        except FrameError as exc:
            log.warning("add port: closing the connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("add port: connection from %s ended: %r", peer, exc)
        finally:
            self._connections.discard(task)
            writer.close()


async def _requests(reader: asyncio.StreamReader, peer: object) -> AsyncIterator[SizedAddEntriesRequest]:
    """The client's messages until it closes; a fault is logged here (the handler's reader would
    only see the stream end) and ends the stream."""
    try:
        while (message := await read_frame(reader)) is not None:
            yield parse_add_entries(message)
    except (FrameError, DecodeError) as exc:
        log.warning("add port: ending the stream from %s: %s", peer, exc or type(exc).__name__)
        raise

