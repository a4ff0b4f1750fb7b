"""A fault-injecting TCP proxy: one listening address forwarded to one target.

``pybk verify`` puts one in front of every link it wants to break. Each bookie binds 127.0.0.1
and *advertises* its own loopback alias (127.0.1.<i+1>) with the same ports, so every client
reaches it through the proxies listening on that alias (gRPC port and add port), and each bookie
and writer reaches ZooKeeper through its own proxy. No network namespaces or root needed.

Modes, switched at any moment:

* ``pass``: bytes flow both ways.
* ``partition``: every open connection is cut and new ones are refused (closed at once), as a
  host that went away; peers see resets and time-outs.
* ``slow``: each chunk is held ``delay_s`` before it is forwarded, both ways (a slow link).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
PASS = "pass"
PARTITION = "partition"
SLOW = "slow"


class FaultProxy:
    def __init__(self, name: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.name = name
        self.listen = listen
        self.target = target
        self.mode = PASS
        self.delay_s = 0.0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._cut_all()
        # The server does not end its handlers: each one still owns its sockets.
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def set_pass(self) -> None:
        self.mode, self.delay_s = PASS, 0.0

    def set_partition(self) -> None:
        self.mode = PARTITION
        self._cut_all()

    def set_slow(self, delay_s: float) -> None:
        self.mode, self.delay_s = SLOW, delay_s

    def _cut_all(self) -> None:
        for writer in list(self._links):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._links.clear()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            await self._link(client_r, client_w)
        finally:
            client_w.transport.abort()

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.mode == PARTITION:
            return
        try:
            server_r, server_w = await asyncio.wait_for(asyncio.open_connection(*self.target), 5.0)
        except (OSError, TimeoutError):
            return
        if self.mode == PARTITION:  # cut while we connected
            server_w.transport.abort()
            return
        self._links.update((client_w, server_w))
        try:
            await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
        finally:
            for w in (client_w, server_w):
                self._links.discard(w)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if self.mode == SLOW and self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                if self.mode == PARTITION:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # Half-close is not worth modelling: either side ending ends the link.
            writer.transport.abort()
