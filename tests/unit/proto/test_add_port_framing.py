"""The add port's framing, read back through a real asyncio stream reader."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bkproto.add_port import FRAME_HEADER, FrameError, frame, keep_alive, read_frame, read_preface


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_frames_read_back_in_order_then_none_at_a_clean_end() -> None:
    reader = reader_of(frame(b"first") + frame(b"") + frame(b"x" * 70_000))
    assert [await read_frame(reader) for _ in range(4)] == [b"first", b"", b"x" * 70_000, None]


async def test_a_connection_closed_inside_a_frame_is_an_error_not_an_end() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader_of(frame(b"message")[:-1]))
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader_of(FRAME_HEADER.pack(5)[:2]))


async def test_an_oversized_frame_is_refused_before_its_body_is_read() -> None:
    with pytest.raises(FrameError, match="frame of 101 bytes exceeds the 100-byte limit"):
        await read_frame(reader_of(FRAME_HEADER.pack(101)), max_bytes=100)


async def test_preface_is_checked_and_a_wrong_one_is_named() -> None:
    await read_preface(reader_of(b"PYBKADD\x01"))
    with pytest.raises(FrameError, match=r"got b'PYBKADD\\x02'"):
        await read_preface(reader_of(b"PYBKADD\x02"))
    with pytest.raises(FrameError, match="closed after 3 bytes"):
        await read_preface(reader_of(b"PYB"))


def test_keep_alive_is_set_on_the_socket() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        keep_alive(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
