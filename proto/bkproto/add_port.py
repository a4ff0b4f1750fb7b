"""The add port's wire format: the AddEntries stream over plain TCP, shared by bookie and client.

Why a second way to carry adds: gRPC is every other call's transport, but a grpc.aio stream
message costs tens of microseconds of CPU on each side and two thread hand-offs (gRPC's event
engine to the asyncio loop and back), per message and per direction. On a busy host that is what
an add waits for. The same messages over a plain asyncio socket cut the client's add latency and
CPU (measured: docs/performance.md).

The format: the client opens a connection and sends :data:`PREFACE` (magic and version); then both
sides exchange frames, a 4-byte big-endian length and that many bytes of message. The client's
frames are serialized ``bkproto.v1.AddEntriesRequest`` messages; the bookie answers each with one
``AddEntriesResponse`` frame, in order, exactly as on the gRPC AddEntries stream. A bookie ends
the stream by closing the connection (on shutdown, after answering every message it started).
A frame over :data:`MAX_FRAME_BYTES`, a wrong preface or bytes that do not parse end that
connection only, with the reason in the bookie's log.

The same port carries the ReadStream of a tailing reader, for the same reason: a read-stream
answer over gRPC cost a bookie about as much CPU as an add message (docs/performance.md). A client
opens such a connection with :data:`READ_PREFACE` (or ``bkproto.security.READ_AUTH_PREFACE`` and
its token frame); then its frames are ``ReadStreamRequest`` messages, each of at most
:data:`MAX_READ_REQUEST_BYTES`, and the bookie's are ``ReadStreamResponse`` messages, exactly as on
the gRPC ReadStream. A fencing read is not served there (it is answered EBADREQ): fencing keeps to
gRPC's ReadEntry, the one door whose rights checks know it. A bookie that serves reads on its port
says so in its registration (the :data:`READ_ENDPOINT_ID` endpoint), so a client never sends the
read preface to a bookie that predates it.
"""

from __future__ import annotations

import socket
import struct

PREFACE = b"PYBKADD\x01"  # magic + version 1
READ_PREFACE = b"PYBKRDS\x01"  # a ReadStream connection; as long as PREFACE
FRAME_HEADER = struct.Struct(">I")
# As gRPC's message limit on both sides: a full client batch (4 MiB of bodies) or a 5 MiB entry.
MAX_FRAME_BYTES = 16 * 1024 * 1024
# A read request is a few dozen bytes: a larger frame on a read connection is a broken peer. Kept
# small because a parked poll keeps its whole request (unknown fields too) until it is answered.
MAX_READ_REQUEST_BYTES = 1024
ENDPOINT_ID = "add"  # the add port's endpoint in a bookie's registration (BookieServiceInfo)
ENDPOINT_PROTOCOL = "pybk-add-v1"
READ_ENDPOINT_ID = "read"  # the same port, advertised as serving the ReadStream too
READ_ENDPOINT_PROTOCOL = "pybk-read-v1"


class FrameError(Exception):
    """The peer broke the framing (wrong preface, oversized frame); the connection must close."""


def frame(message: bytes) -> bytes:
    """``message`` with its length header."""
    return FRAME_HEADER.pack(len(message)) + message


def keep_alive(sock: socket.socket | None) -> None:
    """TCP keepalive on an add-port connection: either side notices a peer whose host vanished
    within ~20 s, as gRPC's keepalive pings (every 10 s, 5 s to answer) do on its channels."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 2)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
