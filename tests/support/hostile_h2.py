"""Hostile gRPC peers below the gRPC library: raw HTTP/2 (``h2``), where a gRPC client library
would not let them misbehave. Run through ``python -m tests.support.hostile ATTACK``:

- ``unfinished-grpc-messages``: calls whose request message never completes (each stream's
  headers name a Bookie method, its first DATA frame's gRPC prefix announces ``--frame-bytes``, and
  it then sends ``--send-bytes`` of it as fast as flow control allows, and nothing more);
- ``unread-read-entries``: whole ReadEntries (or ReadEntry) calls whose answers are never taken
  (the peer grants no flow-control window beyond HTTP/2's first 64 KiB), so the bookie holds what
  it has built.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import struct

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from bkproto.v1 import bookie_pb2


def _headers(method: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"), (":scheme", "http"), (":path", f"/bkproto.v1.Bookie/{method}"),
        (":authority", "bookie"), ("content-type", "application/grpc"), ("te", "trailers"),
    ]  # fmt: skip


_HEADERS = _headers("ReadEntry")


class _Stats:
    def __init__(self) -> None:
        self.sent = 0
        self.ended = 0  # streams the bookie ended (trailers or reset) or whose connection closed

    def end(self, count: int = 1) -> None:
        self.ended += count
        print(f"closed {self.ended}", flush=True)


async def _one_connection(
    target: tuple[str, int], source: str, args: argparse.Namespace, stats: _Stats
) -> None:
    from tests.support.hostile import _open

    try:
        reader, writer = await _open(target, source)
    except OSError:
        stats.end(args.streams)
        return
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    open_streams: dict[int, int] = {}  # stream -> bytes still to send
    for _ in range(args.streams):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, _HEADERS)
        open_streams[stream] = args.send_bytes
    prefix = b"\x00" + struct.pack(">I", args.frame_bytes)
    alive = set(open_streams)
    try:
        while True:
            for stream, left in list(open_streams.items()):
                if stream not in alive:
                    continue
                with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                    window = min(conn.local_flow_control_window(stream), left, 16384)
                    if window > 0:
                        first = left == args.send_bytes
                        data = ((prefix if first else b"") + bytes(window))[:window]
                        conn.send_data(stream, data)
                        open_streams[stream] = left - window
                        stats.sent += window
            writer.write(conn.data_to_send())
            await writer.drain()
            data = await reader.read(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if not isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    continue
                if event.stream_id in alive:
                    alive.discard(event.stream_id)
                    stats.end()
    except (OSError, h2.exceptions.ProtocolError):
        pass
    if alive:
        stats.end(len(alive))


async def unfinished_grpc_messages(target: tuple[str, int], args: argparse.Namespace) -> None:
    """``--connections`` per source, ``--streams`` calls each, every request message unfinished."""
    from tests.support.hostile import on_every_connection

    stats = _Stats()
    await on_every_connection(
        lambda source: _one_connection(target, source, args, stats), args, lambda: {"bytes_sent": stats.sent}
    )



async def idle_connections(target: tuple[str, int], args: argparse.Namespace) -> None:
    """``--connections`` per source that speak HTTP/2's preface and settings, then start no call;
    ``closed N`` as the server closes them."""
    from tests.support.hostile import _Closures, _open, _until_closed, sources

    closures = _Closures()
    held: list[asyncio.Task[None]] = []
    for source in sources(args.sources):
        for _ in range(args.connections):
            reader, writer = await _open(target, source)
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            writer.write(conn.data_to_send())
            held.append(asyncio.create_task(_until_closed(reader, writer, closures)))
    print("ready " + json.dumps({"connections": len(held)}), flush=True)
    await asyncio.gather(*held)
    await asyncio.Event().wait()


async def unread_read_entries(target: tuple[str, int], args: argparse.Namespace) -> None:
    """``--connections`` per source, ``--streams`` calls each of ``--method`` ReadEntries (ledger
    ``--ledger`` from entry 0, up to ``--max-bytes``) or ReadEntry (its entry 0), answers left
    untaken; ``closed N`` if the bookie closes a connection."""
    from tests.support.hostile import _Closures, _open, on_every_connection

    if args.method == "ReadEntry":  # entry 0, whatever its size
        request = bookie_pb2.ReadRequest(ledger_id=args.ledger, entry_id=0).SerializeToString()
    else:
        request = bookie_pb2.ReadEntriesRequest(
            ledger_id=args.ledger, first_entry_id=0, max_count=100_000, max_bytes=args.max_bytes
        ).SerializeToString()
    message = b"\x00" + struct.pack(">I", len(request)) + request
    closures = _Closures()

    async def one(source: str) -> None:
        reader, writer = await _open(target, source)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        for _ in range(args.streams):
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, _headers(args.method))
            conn.send_data(stream, message, end_stream=True)
        writer.write(conn.data_to_send())
        with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
            # Settings and pings are answered (h2 does it), received data never acknowledged.
            while data := await reader.read(65536):
                conn.receive_data(data)
                writer.write(conn.data_to_send())
        closures.one()

    await on_every_connection(one, args)
