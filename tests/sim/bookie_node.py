"""A bookie in the simulation: the real ``Bookie`` core and the real gRPC handlers
(``bookie.handlers.servicer.BookieServicer``) over a :class:`~tests.sim.disk.SimDisk`, and the
real add port (``bookie.add_port.AddPortServer``).

gRPC requests arrive as serialized protobuf bytes, are parsed with the same deserializers the
gRPC server registers, and are served by the servicer's handler objects; responses leave
serialized. The add port's connections get their bytes from a simulated TCP connection
(``tests.sim.tcp``), and parse them as the daemon does.
A crash cancels everything the process was doing, drops unsynced disk writes (``SimDisk.crash``)
and ends its connections; a restart replays the journal into a fresh ``Bookie``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from bkproto.v1 import bookie_pb2
from bookie.add_port import AddPortServer
from bookie.add_port_connection import AddPortConnection
from bookie.api import AddOp, AddResult
from bookie.bookie import Bookie
from bookie.handlers.add_entries import AddEntriesDecoder, SizedAddEntriesRequest
from bookie.handlers.common import HandlerLimits
from bookie.handlers.servicer import BookieServicer
from bookie.limits import ListenerLimits, QuietLog, peer_host
from bookie.stats import RequestStats
from bookie.storage.memory import MemoryLedgerStorage

from .disk import SimDisk
from .network import Connection, Network
from .tcp import Serving
from .trace import Trace

log = logging.getLogger(__name__)

# Sends a unary call's answer to its client: the answer, and what to run once it arrives.
UnaryReply = Callable[[bytes, Callable[[], None]], None]

_UNARY_REQUESTS: dict[str, Any] = {
    "ReadEntry": bookie_pb2.ReadRequest,
    "ReadEntries": bookie_pb2.ReadEntriesRequest,
    "ReadLac": bookie_pb2.ReadLacRequest,
    "WriteLac": bookie_pb2.WriteLacRequest,
    "ForceLedger": bookie_pb2.ForceLedgerRequest,
    "GetBookieInfo": bookie_pb2.GetBookieInfoRequest,
}


class SimBookie(Bookie):
    """The real ``Bookie``; ``skip_fence_check`` is the test-only broken variant: adds to a fenced
    ledger are accepted."""

    def __init__(
        self, storage: MemoryLedgerStorage, wall_clock_ms: Callable[[], int], skip_fence_check: bool = False
    ) -> None:
        super().__init__(storage, wall_clock_ms=wall_clock_ms)
        self._skip_fence_check = skip_fence_check

    async def add_entries(self, ops: Sequence[AddOp]) -> list[AddResult]:
        if self._skip_fence_check:
            ops = [op._replace(recovery=True) for op in ops]
        return await super().add_entries(ops)


class _PeerContext:
    """What the handlers ask of grpc's ServicerContext: who the peer is (per-peer budgets), and
    what to run when a unary call ends (a read answer's bytes go back to the answer budget)."""

    def __init__(self, conn: Connection) -> None:
        self._peer = f"ipv4:{conn.client}:{conn.cid}"
        self._done_callbacks: list[Callable[[Any], None]] = []

    def peer(self) -> str:
        return self._peer

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._done_callbacks.append(callback)

    def end(self) -> None:
        """The call is over (its answer delivered, it failed, or it was cancelled): as gRPC
        does, run the callbacks, once."""
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            callback(self)

    async def send_initial_metadata(self, metadata: Any) -> None:
        """The add stream's "taken" (``bkproto.grpc_add_stream``): the simulated call, like the
        add port's, lets the client write at once, so there is no one to tell."""


class _ServerStream:
    """The bookie end of one bidi stream: requests in through ``push``, responses out."""

    def __init__(
        self, node: BookieNode, conn: Connection, method: str, send: Callable[[bytes | None], None]
    ) -> None:
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._node = node
        self._conn = conn
        self._send = send
        self._task = node.spawn(self._run(method), f"{method}-stream")
        conn.on_reset(self.cancel)  # gRPC cancels the server side of a call whose connection dropped

    def push(self, data: bytes) -> None:
        self._queue.put_nowait(data)

    def cancel(self) -> None:
        self._task.cancel()

    async def _requests(self, parse: Callable[[bytes], Any]) -> AsyncIterator[Any]:
        while (data := await self._queue.get()) is not None:
            yield parse(data)

    async def _run(self, method: str) -> None:
        servicer = self._node.servicer
        assert servicer is not None
        responses: AsyncIterator[Any]
        context: Any = _PeerContext(self._conn)
        if method == "AddEntries":
            decode = AddEntriesDecoder(HandlerLimits().max_adds_per_message)  # as the service registers it
            responses = servicer.AddEntries(self._requests(decode), context)
        else:
            responses = servicer.ReadStream(self._requests(bookie_pb2.ReadStreamRequest.FromString), context)
        async for response in responses:
            if not self._node.serves(self._conn):
                return
            self._send(response.SerializeToString())
        if self._node.serves(self._conn):
            self._send(None)


class _PipelineStream:
    """The bookie end of an add stream served as the add port serves it: each message offered to
    the handler's :class:`~bookie.handlers.add_pipeline.AddPipeline` as it arrives, the ones it
    refuses (window, byte budgets) kept in order until it has room, as the add port leaves them
    in its socket; the answers written from the batches' completion, without a task."""

    def __init__(self, node: BookieNode, conn: Connection, send: Callable[[bytes | None], None]) -> None:
        servicer = node.servicer
        assert servicer is not None
        self._node = node
        self._conn = conn
        self._send = send
        self._decode = AddEntriesDecoder(HandlerLimits().max_adds_per_message)
        self._waiting: deque[SizedAddEntriesRequest] = deque()  # arrived, not taken yet
        self._reading = True
        self._closed = False
        self._pipeline = servicer.add_entries.open_pipeline(self, peer_host(_PeerContext(conn).peer()))
        conn.on_reset(self.cancel)  # the add port's connection_lost

    def push(self, data: bytes) -> None:
        if self._reading:
            self._waiting.append(self._decode(data))
            self.room()

    def cancel(self) -> None:
        if not self._closed:
            self._closed = True
            self._waiting.clear()
            self._pipeline.close()

    # -- AddStreamCarrier --------------------------------------------------------------------

    def write_answer(self, response: bookie_pb2.AddEntriesResponse) -> bool:
        if self._node.serves(self._conn):
            self._send(response.SerializeToString())
        return True

    def room(self) -> None:
        waiting = self._waiting
        while waiting and not self._closed and self._pipeline.offer(waiting[0]):
            waiting.popleft()

    def answered_all(self) -> None:
        if not self._reading and not self._waiting and not self._closed:
            self.cancel()
            if self._node.serves(self._conn):
                self._send(None)

    def stop_reading(self) -> None:
        self._reading = False
        self._waiting.clear()
        if self._pipeline.idle:
            self.answered_all()

    def broken(self, why: str) -> None:
        log.warning("add stream broken: %s", why)
        self.cancel()


class _FaultRecord(QuietLog):
    """The add port's fault log, every fault kept (the ``add_port_clean`` invariant reads them)."""

    def __init__(self, faults: list[str]) -> None:
        super().__init__(logging.getLogger("bookie.add_port"))
        self.faults = faults

    def warning(self, message: str, *args: object) -> None:
        self.faults.append(message % args)


class BookieNode:
    def __init__(self, bookie_id: str, network: Network, disk: SimDisk, trace: Trace) -> None:
        self.bookie_id = bookie_id
        self.network = network
        self.disk = disk
        self.trace = trace
        self.core: SimBookie | None = None
        self.servicer: BookieServicer | None = None
        self.up = False
        self.epoch = 0
        self.skip_fence_check = False
        self.wall_clock_ms: Callable[[], int] = lambda: 0
        self.limits = HandlerLimits()
        self.listener_limits = ListenerLimits()  # the add port's
        self.add_pipeline = False  # serve add streams as the add port does (else as gRPC does)
        self.add_port: AddPortServer | None = None  # while up
        self.add_port_faults: list[str] = []  # of every incarnation
        self._tasks: set[asyncio.Task[Any]] = set()

    def serves(self, conn: Connection) -> bool:
        return self.up and conn.epoch == self.epoch

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.bookie_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def start(self) -> None:
        self.network.server_started(self.bookie_id)
        self.epoch = self.network.epoch(self.bookie_id)
        storage = self.disk.open()
        self.core = SimBookie(storage, self.wall_clock_ms, self.skip_fence_check)
        await self.core.start()
        stats = RequestStats(CollectorRegistry())
        self.servicer = servicer = BookieServicer(self.core, stats, self.limits)
        self.add_port = AddPortServer(
            servicer.add_entries, stats, self.bookie_id, 0, self.listener_limits,
            AddEntriesDecoder(self.limits.max_adds_per_message), reads=servicer.read_stream,
            fault_log=_FaultRecord(self.add_port_faults),
        )  # fmt: skip
        self.up = True
        self.trace.event(
            f"bookie {self.bookie_id} started (epoch {self.epoch}, replayed {storage.replayed_records})"
        )

    def crash(self, host_down: bool) -> None:
        """The process dies: no more answers, unsynced writes lost, connections end."""
        if not self.up:
            return
        self.up = False
        self.trace.event(f"bookie {self.bookie_id} crashed{' (host down)' if host_down else ''}")
        for task in sorted(self._tasks, key=lambda t: getattr(t, "sim_id", 0)):
            task.cancel()
        if self.core is not None:
            self.core.waiters.cancel_all()
        self.disk.crash()  # the storage stops; the disk keeps what was synced, maybe a little more
        self.network.server_crashed(self.bookie_id, host_down)
        self.core = None
        self.servicer = None
        self.add_port = None

    # -- requests ----------------------------------------------------------------------------

    def accept_add_port(self, conn: Connection) -> tuple[AddPortConnection, Serving] | None:
        """A connection to the add port arrives: its protocol, and whether this process still
        serves it (None if the add port is not listening)."""
        if not self.serves(conn) or self.add_port is None:
            return None
        self.trace.event(f"add port of {self.bookie_id}: connection #{conn.cid} from {conn.client}")
        return self.add_port.new_connection(), lambda: self.serves(conn)

    def serve_unary(
        self, conn: Connection, method: str, data: bytes, reply: UnaryReply
    ) -> Callable[[], None]:
        """Serve one unary call; returns what cancels it (the client gave up: gRPC cancels the
        handler, or drops its answer). The call ends when its answer reaches the client, as gRPC
        holds an answer until its peer takes it, or when it is cancelled or its connection drops."""
        request = _UNARY_REQUESTS[method].FromString(data)
        context = _PeerContext(conn)
        task = self.spawn(self._unary(conn, method, request, reply, context), method)

        def cancel() -> None:
            task.cancel()
            context.end()

        conn.on_reset(cancel)
        return cancel

    async def _unary(
        self, conn: Connection, method: str, request: Any, reply: UnaryReply, context: _PeerContext
    ) -> None:
        servicer = self.servicer
        assert servicer is not None
        try:
            response = await getattr(servicer, method)(request, context)
        except BaseException:
            context.end()
            raise
        if self.serves(conn):
            reply(response.SerializeToString(), context.end)
        else:
            context.end()

    def open_stream(
        self, conn: Connection, method: str, send: Callable[[bytes | None], None]
    ) -> _ServerStream | _PipelineStream:
        if method == "AddEntries" and self.add_pipeline:
            return _PipelineStream(self, conn, send)
        return _ServerStream(self, conn, method, send)
