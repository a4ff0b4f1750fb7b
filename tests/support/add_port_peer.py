"""A raw add-port peer for the tests of the bookie's add port: frames written and read by hand, so
a test decides how they are cut into TCP writes and when (or whether) answers are read. The same
peer speaks the ReadStream when connected with ``READ_PREFACE``."""

from __future__ import annotations

import asyncio
import socket

from bkproto.add_port import FRAME_HEADER, PREFACE, frame
from bkproto.v1 import bookie_pb2
from bookie.service import BookieService


def add_message(*adds: bookie_pb2.AddRequest) -> bytes:
    """One AddEntries message with its frame header."""
    return frame(bookie_pb2.AddEntriesRequest(adds=adds).SerializeToString())


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The bookie's next frame's message; None if it closed the connection between frames."""
    try:
        header = await reader.readexactly(FRAME_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    (length,) = FRAME_HEADER.unpack(header)
    return await reader.readexactly(length)


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, *adds: bookie_pb2.AddRequest) -> None:
        self.writer.write(add_message(*adds))
        await self.writer.drain()

    async def send_in_pieces(self, data: bytes, piece_bytes: int) -> None:
        """``data`` as separate TCP segments of ``piece_bytes`` (no Nagle, a loop turn between)."""
        for start in range(0, len(data), piece_bytes):
            self.writer.write(data[start : start + piece_bytes])
            await self.writer.drain()
            await asyncio.sleep(0.001)

    async def receive(self) -> bookie_pb2.AddEntriesResponse | None:
        message = await asyncio.wait_for(read_frame(self.reader), 5)
        return None if message is None else bookie_pb2.AddEntriesResponse.FromString(message)

    async def send_read(self, *requests: bookie_pb2.ReadStreamRequest) -> None:
        """ReadStream requests (a connection opened with the read preface)."""
        self.writer.write(b"".join(frame(request.SerializeToString()) for request in requests))
        await self.writer.drain()

    async def receive_read(self) -> bookie_pb2.ReadStreamResponse | None:
        message = await asyncio.wait_for(read_frame(self.reader), 5)
        return None if message is None else bookie_pb2.ReadStreamResponse.FromString(message)


async def connect(service: BookieService, preface: bytes = PREFACE) -> Connection:
    assert service.add_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", service.add_port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer.write(preface)
    return Connection(reader, writer)


def exchange_over_add_port(
    add_port: int, request: bookie_pb2.AddEntriesRequest
) -> bookie_pb2.AddEntriesResponse:
    """``request``'s answer from the add port at ``add_port`` (a stream of that one message),
    blocking: for tests against a bookie process. ConnectionError if the bookie closes first."""
    with socket.create_connection(("127.0.0.1", add_port), timeout=30) as sock:
        sock.sendall(PREFACE + frame(request.SerializeToString()))
        with sock.makefile("rb") as answers:
            header = answers.read(FRAME_HEADER.size)
            (length,) = FRAME_HEADER.unpack(header) if len(header) == FRAME_HEADER.size else (-1,)
            message = answers.read(length) if length >= 0 else b""
            if len(message) != length:
                raise ConnectionError("the bookie closed the add port before its answer")
            return bookie_pb2.AddEntriesResponse.FromString(message)
