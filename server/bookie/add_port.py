"""The bookie's add port: the AddEntries stream over plain TCP (format and why: ``bkproto.add_port``).

Each connection is one add stream served by the same :class:`AddEntriesHandler` as the gRPC
method, so pipelining, the stream window, the in-progress byte budget and shutdown draining are
shared, not duplicated. Backpressure is TCP's own: a stream at its window stops reading its
socket, and answers are written only as fast as the client takes them (``drain``).

With TLS (``bookie.security``) the socket is wrapped from the first byte; with authentication on,
the caller's identity comes from its certificate or from the token frame after the authenticating
preface (``bkproto.security``), and a caller without the write right gets EUA for every add.

A connection that breaks the format (wrong preface, oversized frame, a message that does not
parse) is closed with a warning naming the peer and the fault; other connections carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from google.protobuf.message import DecodeError

from bkproto import security as wire
from bkproto.add_port import PREFACE, FrameError, frame, keep_alive, read_frame, read_preface
from bkproto.v1 import bookie_pb2
from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest, parse_add_entries
from bookie.security import BookieSecurity, Right, refused_add_response
from bookie.stats import RequestStats

log = logging.getLogger(__name__)

# A connection must say what it is this soon, or it is closed: idle sockets must not pile up.
PREFACE_TIMEOUT_S = 10.0


class AddPortServer:
    """Listens on the add port. ``start()`` binds and serves; ``stop_accepting()`` then
    ``close()`` end it (the handler's own drain answers the started batches in between)."""

    def __init__(
        self, handler: AddEntriesHandler, stats: RequestStats, bind_address: str, port: int,
        security: BookieSecurity | None = None,
    ) -> None:
        self._handler = handler
        self._security = security
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
            ssl = self._security.ssl_context if self._security is not None else None
            self._server = await asyncio.start_server(
                self._serve, self._bind_address, self._requested_port, ssl=ssl,
                # a peer that never completes the handshake is dropped as one that never says hello
                ssl_handshake_timeout=PREFACE_TIMEOUT_S if ssl is not None else None,
            )
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
                refusal = await asyncio.wait_for(self._authenticate(reader, writer), PREFACE_TIMEOUT_S)
            except TimeoutError:
                raise FrameError(f"no preface within {PREFACE_TIMEOUT_S:g} s") from None
            if refusal is not None:
                await _refuse(reader, writer, peer, refusal)
                return
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


    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """Read the preface (and token); why the caller may not add, or None when it may."""
        preface = await read_preface(reader, (PREFACE, wire.AUTH_PREFACE))
        token = None
        if preface == wire.AUTH_PREFACE:
            raw = await read_frame(reader, wire.MAX_TOKEN_BYTES)
            token = raw.decode("utf-8", "replace") if raw is not None else None
        if self._security is None or not self._security.guard.required:
            return None
        guard = self._security.guard
        identity = guard.identify(wire.common_name(writer.get_extra_info("peercert")), token)
        return guard.refusal("add", identity, Right.WRITE)


async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object, why: str) -> None:
    """Answer every add of the connection with EUA (as BookKeeper does before authentication)."""
    log.info("add port: refusing the adds of %s: %s", peer, why)
    while (message := await read_frame(reader)) is not None:
        try:
            request = bookie_pb2.AddEntriesRequest.FromString(message)
        except DecodeError as exc:
            raise FrameError(f"a message that does not parse: {exc}") from None
        writer.write(frame(refused_add_response(request, why).SerializeToString()))
        await writer.drain()


async def _requests(reader: asyncio.StreamReader, peer: object) -> AsyncIterator[SizedAddEntriesRequest]:
    """The client's messages until it closes; a fault is logged here (the handler's reader would
    only see the stream end) and ends the stream."""
    try:
        while (message := await read_frame(reader)) is not None:
            yield parse_add_entries(message)
    except (FrameError, DecodeError) as exc:
        log.warning("add port: ending the stream from %s: %s", peer, exc or type(exc).__name__)
        raise

