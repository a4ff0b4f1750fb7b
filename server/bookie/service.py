"""The bookie's gRPC server: the Bookie service, gRPC health and reflection, on one port; and
beside it, unless turned off, the add port (the AddEntries stream over plain TCP, ``add_port``).

Message limits are raised on both directions (a batch of adds or a batched read is several MiB;
BookKeeper's frame limit is 5 MiB), and ``SO_REUSEPORT`` is off so a second bookie on the same
port fails loudly instead of silently sharing it. Health turns SERVING only once the service is
started, which is what test fixtures and orchestrators wait for.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bkproto.v1 import bookie_pb2
from bookie.add_port import AddPortServer
from bookie.api import BookieCore
from bookie.grpc_intake import GrpcIntake
from bookie.handlers import BookieServicer, HandlerLimits
from bookie.handlers.add_entries import AddEntriesDecoder, TooManyAdds, parse_add_entries
from bookie.limits import ListenerLimits, QuietLog
from bookie.security import BookieSecurity, GrpcGuard
from bookie.stats import RequestStats

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

MiB = 1024 * 1024
# Room for a full AddEntries batch (the client caps batches at 4 MiB of bodies) or a 5 MiB entry.
MAX_MESSAGE_BYTES = 16 * MiB
# Streams at once on one connection: a client's add and read streams plus its concurrent unary calls.
MAX_CONCURRENT_STREAMS = 1024
LISTENER = "grpc"  # the ``listener`` label of the limit metrics
SERVICE_NAME = bookie_pb2.DESCRIPTOR.services_by_name["Bookie"].full_name  # "bkproto.v1.Bookie"

SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    # Clients keep connections alive with pings; allow them without striking the connection.
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
]


_HANDLER_FACTORIES: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def server_options(limits: ListenerLimits) -> list[tuple[str, int]]:
    """The gRPC server's channel arguments under ``limits``."""
    return [
        *SERVER_OPTIONS,
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        # A connection without calls holds a slot of ``max_connections`` and escapes the per-IP
        # count (that counts connections carrying calls): close it after a while. Clients
        # reconnect at their next call.
        ("grpc.max_connection_idle_ms", int(limits.connection_idle_timeout_s * 1000)),
        ("grpc.server_handshake_timeout_ms", int(limits.frame_timeout_s * 1000)),
    ]


def method_handlers(
    servicer: BookieServicer,
    guard: GrpcGuard | None = None,
    stats: RequestStats | None = None,
    max_adds_per_message: int | None = None,
    intake: GrpcIntake | None = None,
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The Bookie service's method table, as the generated ``add_BookieServicer_to_server`` builds
    it, except that AddEntries requests arrive with their wire size (for the in-progress budget)
    and at most ``max_adds_per_message`` adds; with a ``guard``, every method first checks the
    caller's identity and rights; and a request that cannot be decoded is answered
    INVALID_ARGUMENT (RESOURCE_EXHAUSTED past a limit), counted in ``stats`` and logged in one
    line, not with grpc's traceback per request. With an ``intake``, every method takes its
    requests as a stream and the intake's limits apply before a request is read."""
    malformed = _MalformedGuard(stats)
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in bookie_pb2.DESCRIPTOR.services_by_name["Bookie"].methods:
        request_class = getattr(bookie_pb2, method.input_type.name)
        response_class = getattr(bookie_pb2, method.output_type.name)
        deserialize: Callable[[bytes], Any] = request_class.FromString
        if method.name == "AddEntries":
            deserialize = (
                parse_add_entries if max_adds_per_message is None else AddEntriesDecoder(max_adds_per_message)
            )
        behaviour = getattr(servicer, method.name)
        if guard is not None:
            behaviour = guard.wrap(method.name, behaviour, method.client_streaming)
        behaviour = malformed.streaming(behaviour) if method.client_streaming else malformed.unary(behaviour)
        streaming_request = method.client_streaming
        if intake is not None:
            behaviour = intake.streaming(behaviour) if streaming_request else intake.unary(behaviour)
            streaming_request = True
        factory = _HANDLER_FACTORIES[(streaming_request, method.server_streaming)]
        handlers[method.name] = factory(
            behaviour,
            request_deserializer=malformed.deserializer(method.name, deserialize),
            response_serializer=(
                _serialize if method.name in _PRE_ENCODED else response_class.SerializeToString
            ),
        )
    return handlers


# Methods whose handlers may answer with wire bytes (``bkproto.wire.EncodedMessage``).
_PRE_ENCODED = frozenset({"ReadEntry", "ReadEntries", "ReadStream"})


def _serialize(response: Any) -> bytes:
    """A protobuf message's or an ``EncodedMessage``'s bytes."""
    data: bytes = response.SerializeToString()
    return data


class _Malformed:
    """What a request that cannot be decoded becomes: the status its call ends with, and why."""

    def __init__(self, code: grpc.StatusCode, why: str) -> None:
        self.code = code
        self.why = why


class _MalformedGuard:
    def __init__(self, stats: RequestStats | None) -> None:
        self._stats = stats
        self._quiet = QuietLog(log)

    def deserializer(self, method: str, deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def checked(data: bytes) -> Any:
            try:
                return deserialize(data)
            except Exception as exc:  # noqa: BLE001 - any bytes a peer sends must become a status
                too_many = isinstance(exc, TooManyAdds)
                if self._stats is not None:
                    self._stats.limits.hit(LISTENER, "adds_per_message" if too_many else "malformed")
                why = str(exc) or type(exc).__name__
                self._quiet.warning("gRPC: refused a malformed %s request: %s", method, why)
                code = grpc.StatusCode.RESOURCE_EXHAUSTED if too_many else grpc.StatusCode.INVALID_ARGUMENT
                return _Malformed(code, f"{method} request refused: {why}")

        return checked

    @staticmethod
    def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behavior):
            async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
                if isinstance(request, _Malformed):
                    await context.abort(request.code, request.why)
                async for response in behavior(request, context):
                    yield response

            return unary_stream

        async def unary_unary(request: Any, context: Context) -> Any:
            if isinstance(request, _Malformed):
                await context.abort(request.code, request.why)
            return await behavior(request, context)

        return unary_unary

    @staticmethod
    def streaming(behavior: Callable[..., Any]) -> Callable[..., Any]:
        """A streaming call ends at its first malformed message: the messages before it are
        answered as usual, then the call ends with the malformed one's status."""

        async def stream_stream(request_iterator: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            malformed: list[_Malformed] = []

            async def well_formed() -> AsyncIterator[Any]:
                async for request in request_iterator:
                    if isinstance(request, _Malformed):
                        malformed.append(request)
                        return
                    yield request

            async for response in behavior(well_formed(), context):
                yield response
            if malformed:
                await context.abort(malformed[0].code, malformed[0].why)

        return stream_stream


_TRAILER_LINGER_S = 0.1


class BookieService:
    """Owns the grpc.aio server. ``start()`` binds and serves; ``stop()`` drains and stops."""

    def __init__(
        self,
        core: BookieCore,
        stats: RequestStats,
        bind_address: str = "127.0.0.1",
        port: int = 0,
        limits: HandlerLimits | None = None,
        add_port: int = -1,
        security: BookieSecurity | None = None,
        listener_limits: ListenerLimits | None = None,
    ) -> None:
        """``add_port``: where the add port listens (0 = a free port); -1 = no add port.
        ``security``: TLS and authentication for both (None: plaintext, no checks)."""
        self._bind_address = bind_address
        self._requested_port = port
        self._stats = stats
        self._limits = limits = limits or HandlerLimits()
        self._listener_limits = listener_limits = listener_limits or ListenerLimits()
        self.servicer = BookieServicer(core, stats, limits)
        self._security = security
        self._grpc_guard = GrpcGuard(security.guard, core) if security and security.guard.required else None
        self._add_server = (
            AddPortServer(
                self.servicer.add_entries, stats, bind_address, add_port, listener_limits,
                AddEntriesDecoder(limits.max_adds_per_message), security, self.servicer.read_stream,
            )
            if add_port >= 0
            else None
        )
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]  # stubs predate aio
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self.add_port: int | None = None  # bound once started, if there is one

    def bind(self) -> int:
        """Build the server and bind its port without serving yet; returns the bound port.

        Binding first tells the daemon its bookie id (``host:port``, needed for the cookie check)
        before storage opens any directory."""
        if self._server is not None:
            return self.port
        server = grpc.aio.server(options=server_options(self._listener_limits))
        intake = GrpcIntake(
            self._listener_limits, self._stats.limits,
            self._grpc_guard.early_refusal if self._grpc_guard is not None else None,
        )
        handlers = method_handlers(
            self.servicer, self._grpc_guard, self._stats, self._limits.max_adds_per_message, intake
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]  # stubs predate it
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        target = f"{self._bind_address}:{self._requested_port}"
        try:
            tls = self._security.tls if self._security is not None else None
            if tls is not None:
                self.port = server.add_secure_port(target, tls.grpc_credentials())
            else:
                self.port = server.add_insecure_port(target)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {target}: {exc}") from exc
        self._server = server
        return self.port

    async def start(self) -> int:
        """Bind (if not yet bound) and start serving; returns the bound port (useful with port 0)."""
        self.bind()
        assert self._server is not None
        await self._server.start()
        if self._add_server is not None:
            self.add_port = await self._add_server.start()
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        return self.port

    async def stop(self, grace_s: float = 5.0) -> None:
        """Report NOT_SERVING, stop add streams from taking new batches, let running requests
        finish for up to ``grace_s``, then close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        await self._health.enter_graceful_shutdown()
        if self._add_server is not None:
            self._add_server.stop_accepting()
        self.servicer.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        # Stopping the server closes every connection at once. A client still writing to a
        # drained add stream (it cannot know yet) would then hit a broken pipe and lose the
        # stream's clean end, trailers included. So wait for the drained streams to finish and
        # keep connections open a moment longer for their last answers to reach the clients.
        await self.servicer.add_entries.wait_streams_ended(grace_s)
        await asyncio.sleep(max(0.0, min(_TRAILER_LINGER_S, deadline - loop.time())))
        await server.stop(max(0.0, deadline - loop.time()))
        if self._add_server is not None:
            await self._add_server.close()

    @property
    def add_port_connections(self) -> int:
        """Connections open on the add port now (0 without one)."""
        return self._add_server.open_connections if self._add_server is not None else 0

    @property
    def add_port_buffered_bytes(self) -> int:
        """Receive-budget bytes the add port holds for frames being received now (0 without one)."""
        return self._add_server.buffered_bytes if self._add_server is not None else 0

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
