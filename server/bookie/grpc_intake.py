"""The gRPC door's own limits: what a call may hold before the Bookie service sees its request.

grpc.aio gives the application no accept hook and no view of a request message until it has fully
arrived, while its core grants an incoming message as much flow-control window as the message's
length prefix announces (up to the message limit, 16 MiB) and keeps the bytes until the call ends.
A peer could therefore open streams, announce big messages, send most of their bytes and stop:
the memory stays held for as long as the connection lives. Ending the call frees it.

So every method is registered as taking a *stream* of requests, even those whose clients send one
(the wire is the same: a unary request is a stream of one message). The handler then runs as soon
as the call's headers arrive, and this module, at that moment:

* refuses a caller without an identity when authentication is required, before taking a byte of
  its message (with authentication on, only authenticated peers can make the bookie hold anything);
* counts the call against its connection (``ipv4:1.2.3.4:5678``) and refuses a call on a new
  connection from an IP address that already has ``maxConnectionsPerIp`` connections carrying
  calls (gRPC gives no per-connection hook; connections that carry no call are closed by the core
  after ``connectionIdleTimeoutMs``, and the core refuses connections beyond ``maxConnections``);
* ends a streaming call whose peer leaves an answer untaken for ``writeTimeoutMs``;
* reads a unary call's one request message itself, with a deadline: if it has not arrived within
  ``SLOW_REQUEST_AFTER_S`` the call counts as slow, and at most ``maxSlowRequestsPerIp`` slow calls
  per IP (``maxSlowRequests`` in all) may wait, each for at most ``frameTimeoutMs`` from its start;
  past either, the call ends with RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED, which frees what the
  core buffered for it.

Every refusal is counted in ``bookkeeper_server_LIMIT_REJECTIONS{listener="grpc", limit}``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from bookie.limits import LimitStats, ListenerLimits, peer_host

Context = grpc.aio.ServicerContext[Any, Any]
Refusal = Callable[[Context], "str | None"]

LISTENER = "grpc"
# A well-behaved client's request follows its headers at once; one still missing after this long
# is slow (a slow link, or a peer holding memory on purpose), and slow calls are few per peer.
SLOW_REQUEST_AFTER_S = 1.0


class GrpcIntake:
    """Connection, identity and request-arrival limits of one bookie's gRPC calls (one loop)."""

    def __init__(
        self,
        limits: ListenerLimits,
        stats: LimitStats | None,
        early_refusal: Refusal | None = None,
        slow_after_s: float = SLOW_REQUEST_AFTER_S,
    ) -> None:
        """``early_refusal``: why a call must be refused before its request is read (None: go on)."""
        self._limits = limits
        self._stats = stats
        self._early_refusal = early_refusal
        self._slow_after_s = slow_after_s
        self._calls: dict[str, dict[str, int]] = {}  # IP -> connection (gRPC peer) -> open calls
        self._slow: dict[str, int] = {}  # IP -> slow calls waiting for their request
        self.slow_total = 0

    # -- per-method wrappers -------------------------------------------------------------------

    def unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """``behaviour(request, context)`` (a coroutine or an async generator) as a handler that
        takes the request stream and reads its one message under the limits."""
        if inspect.isasyncgenfunction(behaviour):

            async def unary_stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
                async with _Admitted(self, context) as peer:
                    request = await self._read_request(context, peer)
                    async for response in behaviour(request, context):
                        yield response

            return unary_stream

        async def unary_unary(requests: AsyncIterator[Any], context: Context) -> Any:
            async with _Admitted(self, context) as peer:
                request = await self._read_request(context, peer)
                return await behaviour(request, context)

        return unary_unary

    def streaming(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """A request-streaming handler under the connection and identity limits, whose answers
        the peer must take within ``writeTimeoutMs`` each (else the call ends, and its requests in
        progress stop holding the bookie's budgets)."""

        async def stream(requests: AsyncIterator[Any], context: Context) -> None:
            async with _Admitted(self, context):
                responses = behaviour(requests, context)
                try:
                    async for response in responses:
                        await self._write(context, response)
                finally:
                    await responses.aclose()

        return stream

    async def _write(self, context: Context, response: Any) -> None:
        try:
            async with asyncio.timeout(self._limits.write_timeout_s):
                await context.write(response)
        except TimeoutError:
            self._refuse_count("write_timeout")
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"answers not taken within {self._limits.write_timeout_s:g} s (writeTimeoutMs)",
            )

    # -- limits --------------------------------------------------------------------------------

    async def admit(self, context: Context) -> str:
        """Count the call on its connection, or end it; returns the caller's IP address."""
        if self._early_refusal is not None:
            why = self._early_refusal(context)
            if why is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"EUA: {why}")
        peer = context.peer()
        host = peer_host(peer)
        connections = self._calls.get(host)
        if connections is None:
            connections = self._calls[host] = {}
        if peer not in connections and len(connections) >= self._limits.max_connections_per_peer:
            if not connections:
                del self._calls[host]
            self._refuse_count("connections_per_ip")
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{len(connections)} connections from {host} already carry calls (maxConnectionsPerIp)",
            )
        connections[peer] = connections.get(peer, 0) + 1
        return host

    def release(self, context: Context) -> None:
        peer = context.peer()
        host = peer_host(peer)
        connections = self._calls[host]
        left = connections[peer] - 1
        if left:
            connections[peer] = left
        else:
            del connections[peer]
            if not connections:
                del self._calls[host]

    def connections_with_calls(self, host: str) -> int:
        return len(self._calls.get(host, ()))

    async def _read_request(self, context: Context, host: str) -> Any:
        loop = asyncio.get_running_loop()
        started = loop.time()
        read = asyncio.ensure_future(context.read())
        try:
            done, _ = await asyncio.wait((read,), timeout=self._slow_after_s)
            if not done:
                await self._wait_slow(read, context, host, started + self._limits.frame_timeout_s)
            request = read.result()
        finally:
            read.cancel()
        if request is grpc.aio.EOF:  # type: ignore[attr-defined]  # stubs predate it
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
        return request

    async def _wait_slow(
        self, read: asyncio.Future[Any], context: Context, host: str, deadline: float
    ) -> None:
        held = self._slow.get(host, 0)
        per_ip = held >= self._limits.max_slow_requests_per_peer
        if per_ip or self.slow_total >= self._limits.max_slow_requests:
            self._refuse_count("slow_requests_per_ip" if per_ip else "slow_requests")
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"request message still arriving after {self._slow_after_s:g} s and"
                f" {held if per_ip else self.slow_total} such calls already wait"
                f" ({'maxSlowRequestsPerIp' if per_ip else 'maxSlowRequests'})",
            )
        self._slow[host] = held + 1
        self.slow_total += 1
        try:
            timeout = max(0.0, deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait((read,), timeout=timeout)
        finally:
            self.slow_total -= 1
            left = self._slow[host] - 1
            if left:
                self._slow[host] = left
            else:
                del self._slow[host]
        if not done:
            self._refuse_count("frame_timeout")
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"request message not received within {self._limits.frame_timeout_s:g} s (frameTimeoutMs)",
            )

    def _refuse_count(self, limit: str) -> None:
        if self._stats is not None:
            self._stats.hit(LISTENER, limit)


class _Admitted:
    """``async with _Admitted(intake, context) as host:`` the call counted on its connection."""

    def __init__(self, intake: GrpcIntake, context: Context) -> None:
        self._intake = intake
        self._context = context
        self._admitted = False

    async def __aenter__(self) -> str:
        host = await self._intake.admit(self._context)
        self._admitted = True
        return host

    async def __aexit__(self, *exc: object) -> None:
        if self._admitted:
            self._intake.release(self._context)
