"""The client's add-port frame reader, fed as asyncio feeds a buffered protocol: whatever the
socket reads' sizes, the frames come out whole and in order (small ones gathered, large ones in a
buffer of their own); an end between frames is the end, inside one an error; an oversized frame
breaks the connection; frames not taken stop the socket being read."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkclient.frame_reader import _GATHERED_BYTES, _QUEUED_FRAMES, FrameReader
from bkproto.add_port import FrameError, frame


class Transport(asyncio.Transport):
    """Records what the reader asks of its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.closed = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


def feed(reader: FrameReader, data: bytes, read_sizes: list[int]) -> None:
    """``data`` as socket reads of at most the given sizes (cycled), each into the reader's buffer."""
    at, turn = 0, 0
    while at < len(data):
        room = reader.get_buffer(-1)
        size = min(len(room), read_sizes[turn % len(read_sizes)], len(data) - at)
        room[:size] = data[at : at + size]
        reader.buffer_updated(size)
        at += size
        turn += 1


def connected() -> tuple[FrameReader, Transport]:
    reader, transport = FrameReader(), Transport()
    reader.connection_made(transport)
    return reader, transport


LARGE = st.integers(0, 3 * _GATHERED_BYTES).map(lambda n: bytes([n % 251]) * n)
MESSAGES = st.lists(st.one_of(st.binary(max_size=300), LARGE), max_size=8)


@settings(max_examples=60, deadline=None)
@given(MESSAGES, st.lists(st.integers(1, 200_000), min_size=1, max_size=5))
def test_frames_come_out_whole_and_in_order_whatever_the_reads(
    messages: list[bytes], sizes: list[int]
) -> None:
    async def run() -> list[bytes]:
        reader, _ = connected()
        feed(reader, b"".join(map(frame, messages)), sizes)
        reader.eof_received()
        out = []
        while (message := await reader.read_frame()) is not None:
            out.append(bytes(message))
        return out

    assert asyncio.run(run()) == messages


async def test_an_end_inside_a_frame_is_an_incomplete_read_small_or_large() -> None:
    for message in (b"x" * 100, b"y" * (2 * _GATHERED_BYTES)):
        reader, _ = connected()
        feed(reader, frame(message)[:-1], [70_000])
        reader.connection_lost(None)
        with pytest.raises(asyncio.IncompleteReadError):
            await reader.read_frame()


async def test_a_connection_error_fails_the_read_after_the_frames_before_it() -> None:
    reader, _ = connected()
    feed(reader, frame(b"one"), [10])
    reader.connection_lost(ConnectionResetError("reset"))
    assert await reader.read_frame() == b"one"
    with pytest.raises(ConnectionResetError):
        await reader.read_frame()


async def test_an_oversized_frame_closes_the_connection() -> None:
    reader, transport = FrameReader(max_frame_bytes=1000), Transport()
    reader.connection_made(transport)
    feed(reader, frame(b"z" * 1001), [4096])
    assert transport.closed
    with pytest.raises(FrameError, match="1001 bytes"):
        await reader.read_frame()


async def test_frames_not_taken_stop_the_socket_being_read_until_they_are() -> None:
    reader, transport = connected()
    feed(reader, b"".join(frame(b"m%d" % i) for i in range(_QUEUED_FRAMES)), [4096])
    assert transport.paused
    for _ in range(_QUEUED_FRAMES // 2 + 1):
        await reader.read_frame()
    assert not transport.paused


async def test_a_waiting_read_is_woken_by_the_frame() -> None:
    reader, _ = connected()
    waiting = asyncio.create_task(reader.read_frame())
    await asyncio.sleep(0)
    feed(reader, frame(b"late"), [3])
    assert await asyncio.wait_for(waiting, 1) == b"late"
