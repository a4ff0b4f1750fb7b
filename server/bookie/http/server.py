"""The HTTP admin server of the bookie and of the autorecovery process: a routing table on
aiohttp, served from a thread of its own with an event loop of its own.

Why its own loop: nothing an admin request does (a scrape of a large registry, listing every
ledger, a slow client) can take a turn of the bookie's event loop, which serves the data path;
blocking work (metric collection, calls into the bookie's thread-safe controls, the file system)
goes further, to this loop's worker threads.

What every request gets, whatever the route:

- one request per connection (the answer closes it, as the ``http.server`` before did);
- at most ``httpServerMaxConnections`` connections at once, a quarter of them from one address;
  beyond that a 503 is written at once and the connection closed, counted in
  ``bookkeeper_server_LIMIT_REJECTIONS`` (``connections`` / ``connections_per_ip``);
- the whole request (headers and body) within ``httpServerRequestTimeoutMs`` of the connection
  (after the TLS handshake, itself bounded by the same time), or the connection is cut, counted
  as ``request_timeout``: a client dribbling a byte at a time holds nothing for long; the answer
  too must be taken within that time once it is ready;
- bodies of at most :data:`MAX_BODY_BYTES` (413 otherwise), headers as aiohttp bounds them;
- with authentication on, an identity (client certificate or ``Authorization: Bearer``; 401) and
  the route's right (403): ``read`` for ``GET``, ``admin`` for every call that changes state;
- errors as JSON ``{"error": "..."}``: 404 for an unknown path, 405 with ``Allow`` for a known
  path and a wrong method, 400 for bad parameters, 500 for a failure (logged, never fatal).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from bkproto import security as wire
from bookie.http.replies import error_reply, message_of, status_of
from bookie.limits import ConnectionCounter, LimitStats, ListenerLimits, peer_host
from bookie.security import BookieSecurity, Right

log = logging.getLogger(__name__)

LISTENER = "http"  # the ``listener`` label of the limit metrics
MAX_BODY_BYTES = 65536
START_TIMEOUT_S = 30.0
_BUSY_TEXT = b'{"error": "too many admin requests at once"}'
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_BUSY_TEXT), _BUSY_TEXT)
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One endpoint: ``right`` is what the caller needs when authentication is on (None: ``read``
    for GET, ``admin`` for any other method, whose calls change state)."""

    method: str
    path: str
    handler: Handler
    right: Right | None = None

    def needs(self) -> Right:
        if self.right is not None:
            return self.right
        return Right.READ if self.method == "GET" else Right.ADMIN


class _Gate(asyncio.Protocol):
    """One connection: admitted or refused at once, then handed to aiohttp's own protocol, with
    a deadline that cuts it when the request (or the taking of the answer) drags on."""

    def __init__(self, server: AdminHttpServer, inner: Callable[[], asyncio.Protocol]) -> None:
        self._server = server
        self._make_inner = inner
        self._inner: asyncio.Protocol | None = None
        self._host = ""
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._host = peer_host(transport.get_extra_info("peername"))
        refused = self._server.admit(self._host)
        if refused is not None:
            self._server.limit_hit(refused)
            transport.write(_BUSY)
            transport.close()
            return
        self._server.gates[transport] = self
        self.arm()
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def arm(self) -> None:
        """(Re)start the deadline: the request, or the taking of the answer, must be done by then."""
        self.disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._server.request_timeout_s, self._cut_off)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _cut_off(self) -> None:
        self._deadline = None
        self._server.limit_hit("request_timeout")
        log.debug("http: cutting off %s: not done within %g s", self._host, self._server.request_timeout_s)
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self._inner is None:
            return
        inner, self._inner = self._inner, None
        if self._transport is not None:
            self._server.gates.pop(self._transport, None)
        self._server.release(self._host)
        inner.connection_lost(exc)


class AdminHttpServer:
    """Serves ``routes`` plus ``GET /heartbeat`` and ``GET /metrics`` (Prometheus text of
    ``registry``) on ``bind_address:port``; ``on_close`` runs on the server's loop when it stops
    (to close what routes opened there, such as a cluster client)."""

    def __init__(
        self, registry: CollectorRegistry, routes: Sequence[Route] = (), *,
        bind_address: str = "127.0.0.1", port: int = 0,
        security: BookieSecurity | None = None,
        limits: ListenerLimits | None = None, limit_stats: LimitStats | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        thread_name: str = "bookie-http",
        not_found_hints: Mapping[str, str] | None = None,
    ) -> None:
        limits = limits or ListenerLimits()
        self._registry = registry
        self._routes = [
            Route("GET", "/heartbeat", self._heartbeat), Route("GET", "/metrics", self._metrics), *routes
        ]
        self._rights = {(r.method, r.path): r.needs() for r in self._routes}
        self._bind_address = bind_address
        self._requested_port = port
        self._security = security
        self._limit_stats = limit_stats
        self.request_timeout_s = limits.http_request_timeout_s
        self._connections = ConnectionCounter(limits.http_max_connections,
                                              max(1, limits.http_max_connections // 4))
        self._on_close = on_close
        self._not_found_hints = dict(not_found_hints or {})  # path prefix -> where to look instead
        self._thread_name = thread_name
        self.gates: dict[asyncio.Transport, _Gate] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.port = 0

    # -- connections -------------------------------------------------------------------------

    def admit(self, host: str) -> str | None:
        return self._connections.admit(host)  # only ever on the server's loop: no lock

    def release(self, host: str) -> None:
        self._connections.release(host)

    def limit_hit(self, limit: str) -> None:
        if self._limit_stats is not None:
            self._limit_stats.hit(LISTENER, limit)

    # -- requests ----------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        gate = self.gates.get(transport) if isinstance(transport, asyncio.Transport) else None
        try:
            response = await self._serve(request, handler, gate)
        finally:
            if gate is not None:
                gate.arm()  # the client has that long again to take the answer
        response.force_close()
        return response

    async def _serve(self, request: web.Request, handler: Handler, gate: _Gate | None) -> web.StreamResponse:
        try:
            if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
                too_large = f"body of {request.content_length} bytes is larger than {MAX_BODY_BYTES}"
                return error_reply(413, too_large)
            await request.read()  # the whole request is in (or 413): its deadline is met
            if gate is not None:
                gate.disarm()
            refused = self._refusal(request)
            if refused is not None:
                return refused
            match = request.match_info.http_exception
            if match is not None:
                raise match
            return await handler(request)
        except web.HTTPException as exc:
            reply = error_reply(exc.status, self._why(request, exc))
            if "Allow" in exc.headers:
                reply.headers["Allow"] = exc.headers["Allow"]
            return reply
        except Exception as exc:
            status = status_of(exc)
            if status >= 500:
                log.warning("http %s %s failed: %s", request.method, request.path, exc,
                            exc_info=status == 500)
            return error_reply(status, message_of(exc))

    def _why(self, request: web.Request, exc: web.HTTPException) -> str:
        if exc.status == 405:
            allowed = exc.headers.get("Allow", "")
            return f"{request.method} is not allowed on {request.path} (allowed: {allowed})"
        if exc.status != 404:
            return exc.text or exc.reason
        hints = [hint for prefix, hint in self._not_found_hints.items() if request.path.startswith(prefix)]
        return f"no such endpoint: {request.path}" + "".join(f" ({hint})" for hint in hints)

    def _refusal(self, request: web.Request) -> web.Response | None:
        """The 401/403 answer when authentication is on and the caller may not do this."""
        security = self._security
        if security is None or not security.guard.required:
            return None
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else request.path
        right = self._rights.get((request.method, path),
                                 Right.READ if request.method in ("GET", "HEAD") else Right.ADMIN)
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        token = wire.token_from_header(request.headers.get("Authorization"))
        identity = security.guard.identify(wire.common_name(peercert), token)
        why = security.guard.refusal(LISTENER, identity, right)
        if why is None:
            return None
        return error_reply(401 if identity is None else 403, f"EUA: {why}")

    async def _heartbeat(self, request: web.Request) -> web.Response:
        return web.Response(body=b"OK\n", content_type="text/plain", charset="utf-8")

    async def _metrics(self, request: web.Request) -> web.Response:
        text = await asyncio.to_thread(generate_latest, self._registry)  # takes the metrics' locks
        response = web.Response(body=text)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    # -- life --------------------------------------------------------------------------------

    def start(self) -> int:
        """Bind and serve on a daemon thread with its own loop; returns the bound port."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=self._thread_name, daemon=True)
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._start(), loop).result(START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        return self.port

    async def _start(self) -> int:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES,
                              handler_args={"keepalive_timeout": self.request_timeout_s})
        for route in self._routes:
            app.router.add_route(route.method, route.path, route.handler)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        server = runner.server
        assert server is not None
        ssl_context = self._security.ssl_context if self._security is not None else None
        self._listener = await asyncio.get_running_loop().create_server(
            lambda: _Gate(self, server), self._bind_address, self._requested_port,
            ssl=ssl_context, ssl_handshake_timeout=self.request_timeout_s if ssl_context else None,
            backlog=64, reuse_address=True,
        )
        return int(self._listener.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for transport in list(self.gates):
            transport.abort()
        if self._on_close is not None:
            with contextlib.suppress(Exception):
                await self._on_close()
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.is_running():
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(START_TIMEOUT_S)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not loop.is_running():
            loop.close()


__all__ = ["AdminHttpServer", "Handler", "Route"]
