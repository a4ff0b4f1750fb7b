"""Hostile peers for the hostile-load tests and measurements: each attack runs in a process of its
own (``python -m tests.support.hostile <attack> --target HOST:PORT ...``) so its CPU and memory are
not the test's, prints one ``ready {...}`` JSON line once in place, then ``closed N`` each time
more of its connections have been closed by the bookie, and runs until killed (use
:class:`Attack`).

Attacks come from source addresses of their own (``127.0.0.2`` and up: all of 127/8 is loopback)
so that the bookie's per-IP limits see them as other peers than the well-behaved client on
``127.0.0.1``. gRPC cannot pick its source address, so gRPC attacks go through
:func:`serve_proxy`, a forwarder whose outgoing side binds the source address; except the
long-poll flood, which comes from 127.0.0.1 while the well-behaved poll comes through the proxy.

The well-behaved side: :class:`AddPortClient` (adds over the add port, one at a time, timed),
:func:`rss_bytes` and :func:`peak_rss_bytes` of a process, :func:`limit_rejections` from a
bookie's metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from bkproto.add_port import FRAME_HEADER, PREFACE, frame
from bkproto.v1 import bookie_pb2

S = bookie_pb2
KEY = b"h" * 20
MiB = 1024 * 1024
M = TypeVar("M", bound=Message)
# A minimal add without a master key: field 1 (adds), 2 bytes long, holding ledger_id = 1.
KEYLESS_ADD = b"\x0a\x02\x08\x01"
REPO_ROOT = Path(__file__).resolve().parents[2]


def sources(count: int, first: int = 2) -> list[str]:
    """``count`` loopback source addresses, 127.0.0.<first> and up."""
    return [f"127.0.0.{first + i}" for i in range(count)]


async def on_every_connection(
    connect: Callable[[str], Coroutine[Any, Any, None]],
    args: argparse.Namespace,
    figures: Callable[[], dict[str, object]] | None = None,
) -> None:
    """Run ``connect(source)`` ``--connections`` times per source address; once ``--settle-s``
    has passed print the ready line (the connections, and ``figures()``); then stay up."""
    tasks = [asyncio.create_task(connect(s)) for s in sources(args.sources) for _ in range(args.connections)]
    await asyncio.sleep(args.settle_s)
    print("ready " + json.dumps({"connections": len(tasks), **(figures() if figures else {})}), flush=True)
    await asyncio.gather(*tasks)
    await asyncio.Event().wait()


def keyless_adds_message(count: int, big_ids: bool = False) -> bytes:
    """A serialized AddEntriesRequest of ``count`` adds without a master key (each refused);
    ``big_ids``: ids of 2^62, so that each answer is three times as long."""
    if big_ids:
        add = S.AddRequest(ledger_id=2**62, entry_id=2**62).SerializeToString()
        return (b"\x0a" + bytes([len(add)]) + add) * count
    return KEYLESS_ADD * count


def tiny_adds_message(ledger_id: int, first_entry: int, count: int) -> bytes:
    """A serialized AddEntriesRequest of ``count`` valid adds with 1-byte payloads."""
    from tests.support.bookies import entry_body

    request = S.AddEntriesRequest()
    for entry_id in range(first_entry, first_entry + count):
        request.adds.add(
            ledger_id=ledger_id, entry_id=entry_id, master_key=KEY,
            body=entry_body(ledger_id, entry_id, -1, b"x"),
        )  # fmt: skip
    return request.SerializeToString()


# -- measurements ------------------------------------------------------------------------------


def _status_kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    assert match, f"no {field} for process {pid}"
    return int(match.group(1)) * 1024


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS")


def peak_rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmHWM")


def metrics_text(http_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def limit_rejections(http_port: int, listener: str, limit: str) -> float:
    """``bookkeeper_server_LIMIT_REJECTIONS_total{listener, limit}`` of a bookie (0 if never hit)."""
    labels = {f'listener="{listener}"', f'limit="{limit}"'}
    for line in metrics_text(http_port).splitlines():
        name, _, rest = line.partition("{")
        if name == "bookkeeper_server_LIMIT_REJECTIONS_total":
            label_text, _, value = rest.partition("} ")
            if set(label_text.split(",")) == labels:
                return float(value)
    return 0.0


# -- the well-behaved client -------------------------------------------------------------------


class AddPortClient:
    """A well-behaved add-port client: one add at a time, waiting for its answer."""

    def __init__(self, port: int, timeout_s: float = 60.0) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._sock.sendall(PREFACE)

    def add(self, ledger_id: int, entry_id: int, payload: bytes = b"") -> tuple[int, float]:
        """(status, seconds from sending the add to its answer)."""
        from tests.support.bookies import entry_body

        add = S.AddRequest(
            ledger_id=ledger_id, entry_id=entry_id, master_key=KEY,
            body=entry_body(ledger_id, entry_id, entry_id - 1, payload),
        )  # fmt: skip
        started = time.perf_counter()
        self._sock.sendall(frame(S.AddEntriesRequest(adds=[add]).SerializeToString()))
        (length,) = FRAME_HEADER.unpack(self._recv(FRAME_HEADER.size))
        response = S.AddEntriesResponse.FromString(self._recv(length))
        return response.results[0].status, time.perf_counter() - started

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the bookie closed the add port connection")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self._sock.close()


# -- attacks (run in their own process) --------------------------------------------------------


class Attack:
    """An attack process: ``with Attack("unfinished-frames", target, "--connections", "10") as a``;
    ``a.ready`` is its ready line's JSON; :meth:`wait_closed` waits for its connections to be
    closed by the bookie."""

    def __init__(self, name: str, target: str, *args: str, ready_timeout_s: float = 120.0) -> None:
        command = [sys.executable, "-m", "tests.support.hostile", name, "--target", target, *args]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()
        self.closed = 0
        line = self.wait_for("ready ", ready_timeout_s)
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"attack {name} did not get ready: {line!r}")
        self.ready: dict[str, object] = json.loads(line[len("ready ") :])

    def _read_lines(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(f"exited with {self._proc.wait()}")

    def wait_for(self, prefix: str, timeout_s: float) -> str:
        """The next line starting with ``prefix``, or what came instead: the process's end
        ("exited ..."), or "no line in time". Counts the "closed N" lines on the way."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return "no line in time"
            if line.startswith("closed "):
                self.closed = int(line.split()[1])
            if line.startswith(prefix) or line.startswith("exited"):
                return line

    def wait_closed(self, count: int, timeout_s: float) -> int:
        """Wait until at least ``count`` of its connections were closed (or the timeout); returns
        how many were."""
        deadline = time.monotonic() + timeout_s
        while self.closed < count:
            line = self.wait_for("closed ", deadline - time.monotonic())
            if not line.startswith("closed "):
                break
        return self.closed

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def __enter__(self) -> Attack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Closures:
    """Counts the attack's connections the bookie closed and reports each new total."""

    def __init__(self) -> None:
        self.count = 0

    def one(self) -> None:
        self.count += 1
        print(f"closed {self.count}", flush=True)


async def _open(
    target: tuple[str, int], source: str, limit: int = 2**16, receive_buffer: int = 0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``target`` from ``source``; ``receive_buffer``: a fixed kernel receive
    buffer (no autotuning up to tens of MiB), so a peer that stops reading is noticed soon."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((source, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, target)
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, limit=limit)


async def _until_closed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, closures: _Closures
) -> None:
    # ``writer`` stays referenced meanwhile: a StreamWriter closes its connection when collected.
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass
    closures.one()


async def unfinished_frames(target: tuple[str, int], args: argparse.Namespace) -> None:
    """Connections each announcing a ``--frame-bytes`` frame, sending ``--send-bytes`` of it, then
    nothing."""
    closures = _Closures()
    opened: list[asyncio.Task[None]] = []
    header = PREFACE + FRAME_HEADER.pack(args.frame_bytes)
    for source in sources(args.sources):
        for _ in range(args.connections):
            try:
                reader, writer = await _open(target, source)
            except OSError:
                closures.one()
                continue
            writer.write(header + bytes(args.send_bytes))  # the transport keeps what the bookie won't take
            opened.append(asyncio.create_task(_until_closed(reader, writer, closures)))
    await asyncio.sleep(args.settle_s)  # let the bookie take what it will
    print("ready " + json.dumps({"connections": len(opened)}), flush=True)
    await asyncio.Event().wait()


async def never_read(target: tuple[str, int], args: argparse.Namespace) -> None:
    """Connections sending frames (``--grpc``: AddEntries messages) of ``--adds`` keyless adds as
    fast as the bookie takes them and never reading an answer (the socket's receive buffer
    fills, then the bookie's)."""
    closures = _Closures()
    payload = keyless_adds_message(args.adds, big_ids=True)
    message = frame(payload)
    sent = [0]

    async def flood(source: str) -> None:
        try:
            # a 1-byte read limit: the stream stops reading its socket at once, and never resumes
            _reader, writer = await _open(target, source, limit=1)
            writer.write(PREFACE)
            while True:
                writer.write(message)
                await writer.drain()
                sent[0] += 1
        except OSError:
            pass
        closures.one()

    async def flood_grpc(source: str) -> None:
        # An AddEntries call that keeps writing and never reads; its end (the bookie's status)
        # is seen only through the write that fails after it.
        host, port = target
        proxy, proxy_port = await serve_proxy((host, port), source)
        async with proxy, grpc.aio.insecure_channel(f"127.0.0.1:{proxy_port}") as channel:
            call = channel.stream_stream(
                "/bkproto.v1.Bookie/AddEntries", request_serializer=None, response_deserializer=None
            )()  # type: ignore[call-arg]  # grpc.aio's stream calls take no iterator to be written to
            with contextlib.suppress(grpc.RpcError, grpc.aio.UsageError, OSError):
                while not call.done():
                    await call.write(payload)
                    sent[0] += 1
        closures.one()

    await on_every_connection(flood_grpc if args.grpc else flood, args, lambda: {"frames_sent": sent[0]})


async def big_messages(target: tuple[str, int], args: argparse.Namespace) -> None:
    """Frames of ``--adds`` adds (``--valid``: valid tiny ones on ledgers of their own, else
    keyless), ``--frames`` of them per connection, over the add port or (``--grpc``) gRPC;
    answers are read (a heavy, not a broken, client)."""
    closures = _Closures()
    done = [0]

    def message(connection: int, n: int) -> bytes:
        if args.valid:
            return tiny_adds_message(1_000_000 + connection, n * args.adds, args.adds)
        return keyless_adds_message(args.adds)

    async def over_add_port(source: str, connection: int) -> None:
        try:
            reader, writer = await _open(target, source)
            writer.write(PREFACE)
            for n in range(args.frames):
                writer.write(frame(messages[connection, n]))
                await writer.drain()
                (length,) = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
                await reader.readexactly(length)
                done[0] += 1
        except (OSError, asyncio.IncompleteReadError):
            closures.one()

    async def over_grpc(address: str, connection: int) -> None:
        async def requests() -> AsyncIterator[bytes]:
            for n in range(args.frames):
                yield messages[connection, n]

        async with grpc.aio.insecure_channel(address, options=_GRPC_CLIENT_OPTIONS) as channel:
            add_entries = channel.stream_stream(
                "/bkproto.v1.Bookie/AddEntries", request_serializer=bytes, response_deserializer=bytes
            )
            try:
                async for _ in add_entries(requests()):
                    done[0] += 1
            except grpc.RpcError:
                closures.one()

    messages = {
        (c, n): message(c, n) for c in range(args.connections * args.sources) for n in range(args.frames)
    }
    if args.grpc:
        _proxy, port = await serve_proxy(target, sources(1)[0])
        tasks = [asyncio.create_task(over_grpc(f"127.0.0.1:{port}", c)) for c in range(args.connections)]
    else:
        tasks = [
            asyncio.create_task(over_add_port(s, c))
            for c, s in enumerate(sources(args.sources) * args.connections)
        ]
    print("ready " + json.dumps({"connections": len(tasks)}), flush=True)
    await asyncio.gather(*tasks)
    print(f"finished {done[0]}", flush=True)
    await asyncio.Event().wait()


async def long_polls(target: tuple[str, int], args: argparse.Namespace) -> None:
    """``--count`` long-poll reads parked for ten minutes, over gRPC from 127.0.0.1 (gRPC cannot
    pick its source address, and through :func:`serve_proxy` thousands of calls at once get
    cancelled: the well-behaved poll comes from another address instead, :func:`long_poll_from`)."""
    options = [*_GRPC_CLIENT_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    address = f"{target[0]}:{target[1]}"
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(args.channels)]
    statuses: dict[str, int] = {}  # bookie status or gRPC error -> how many

    async def poll(n: int) -> None:
        call = channels[n % len(channels)].unary_unary(
            "/bkproto.v1.Bookie/ReadEntry",
            request_serializer=S.ReadRequest.SerializeToString,
            response_deserializer=S.ReadResponse.FromString,
        )
        request = S.ReadRequest(ledger_id=424242, entry_id=0, previous_lac=0, timeout_ms=600_000)
        try:
            outcome = S.StatusCode.Name((await call(request)).status)
        except grpc.aio.AioRpcError as exc:
            outcome = f"rpc {exc.code().name}"
        statuses[outcome] = statuses.get(outcome, 0) + 1

    tasks = [asyncio.create_task(poll(n)) for n in range(args.count)]
    await asyncio.sleep(args.settle_s)
    parked = sum(not task.done() for task in tasks)
    print("ready " + json.dumps({"answered": statuses, "parked": parked}), flush=True)
    await asyncio.Event().wait()


async def http_hold(target: tuple[str, int], args: argparse.Namespace) -> None:
    """Connections to the HTTP admin port that send nothing (``--dribble-s``: one byte of a
    request every so many seconds, never finishing it)."""
    closures = _Closures()

    async def hold(source: str) -> None:
        try:
            reader, writer = await _open(target, source)
            waiter = asyncio.create_task(_until_closed(reader, writer, closures))
            if args.dribble_s:
                for byte in b"GET /heartbeat HTTP/1.0\r\nX-Slow: " + b"y" * 10_000:
                    if waiter.done():
                        return
                    writer.write(bytes([byte]))
                    await asyncio.sleep(args.dribble_s)
            await waiter
        except OSError:
            closures.one()

    await on_every_connection(hold, args)


_GRPC_CLIENT_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MiB),
    ("grpc.max_receive_message_length", 64 * MiB),
]


def long_poll_from(source: str, address: str, timeout_ms: int) -> str:
    """The status of one long poll (on a ledger nobody writes) sent from ``source`` to the bookie
    at ``address``: ENOENTRY once it was parked and timed out, ETOOMANYREQUESTS if refused."""
    request = S.ReadRequest(ledger_id=77, entry_id=0, previous_lac=0, timeout_ms=timeout_ms)
    answer = call_from(source, address, "ReadEntry", request, S.ReadResponse, timeout_s=60)
    return str(S.StatusCode.Name(answer.status))


def call_from(
    source: str, address: str, method: str, request: Message, answer_type: type[M], timeout_s: float
) -> M:
    """The answer to one unary Bookie ``method`` call sent from ``source`` to ``address``."""

    async def call() -> M:
        host, _, port = address.rpartition(":")
        proxy, proxy_port = await serve_proxy((host, int(port)), source)
        options = _GRPC_CLIENT_OPTIONS
        async with proxy, grpc.aio.insecure_channel(f"127.0.0.1:{proxy_port}", options=options) as channel:
            unary = channel.unary_unary(
                f"/bkproto.v1.Bookie/{method}",
                request_serializer=type(request).SerializeToString,
                response_deserializer=answer_type.FromString,
            )
            answer: M = await unary(request, timeout=timeout_s)
            return answer

    return asyncio.run(call())


async def serve_proxy(target: tuple[str, int], source: str) -> tuple[asyncio.Server, int]:
    """A TCP forwarder on 127.0.0.1 whose connections reach ``target`` from ``source``."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(256 * 1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            reader, writer = await _open(target, source)
        except OSError:
            client_writer.close()
            return
        # Cancelled when the proxy closes: end quietly (asyncio's stream callback would log a
        # cancelled connection task as an error).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def unfinished_grpc_messages(target: tuple[str, int], args: argparse.Namespace) -> None:
    from tests.support.hostile_h2 import unfinished_grpc_messages as attack  # needs h2 (dev extra)

    await attack(target, args)


async def idle_connections(target: tuple[str, int], args: argparse.Namespace) -> None:
    from tests.support.hostile_h2 import idle_connections as attack  # needs h2 (dev extra)

    await attack(target, args)


async def unread_read_entries(target: tuple[str, int], args: argparse.Namespace) -> None:
    from tests.support.hostile_h2 import unread_read_entries as attack  # needs h2 (dev extra)

    await attack(target, args)


_ATTACKS = {
    "idle-connections": idle_connections,
    "unfinished-frames": unfinished_frames,
    "unfinished-grpc-messages": unfinished_grpc_messages,
    "unread-read-entries": unread_read_entries,
    "never-read": never_read,
    "big-messages": big_messages,
    "long-polls": long_polls,
    "http-hold": http_hold,
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.hostile")
    parser.add_argument("attack", choices=sorted(_ATTACKS))
    parser.add_argument("--target", required=True, help="HOST:PORT of the listener to attack")
    parser.add_argument("--sources", type=int, default=1, help="source addresses, 127.0.0.2 and up")
    parser.add_argument("--connections", type=int, default=1, help="connections per source address")
    parser.add_argument("--frame-bytes", type=int, default=15 * MiB)
    parser.add_argument("--send-bytes", type=int, default=14 * MiB)
    parser.add_argument("--adds", type=int, default=90_000, help="adds per message")
    parser.add_argument("--frames", type=int, default=1, help="messages per connection")
    parser.add_argument("--streams", type=int, default=10, help="gRPC calls per connection")
    parser.add_argument("--valid", action="store_true", help="valid tiny adds instead of keyless ones")
    parser.add_argument("--grpc", action="store_true", help="over gRPC instead of the add port")
    parser.add_argument("--count", type=int, default=10_000, help="long polls")
    parser.add_argument("--channels", type=int, default=10, help="gRPC connections for the long polls")
    parser.add_argument("--dribble-s", type=float, default=0.0)
    parser.add_argument("--ledger", type=int, default=0, help="the ledger a read attack asks for")
    parser.add_argument("--max-bytes", type=int, default=8 * MiB, help="a ReadEntries call's max_bytes")
    parser.add_argument("--method", default="ReadEntries", choices=["ReadEntries", "ReadEntry"])
    parser.add_argument("--settle-s", type=float, default=1.0, help="wait before reporting ready")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_ATTACKS[args.attack]((host, int(port)), args))


if __name__ == "__main__":
    main()
