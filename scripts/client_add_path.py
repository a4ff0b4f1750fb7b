"""The client's add path alone, without bookies: CPU microseconds per entry of a ``WriteHandle``
(E3 Qw2 Qa2, 1 KiB, crc32c) writing through the real ``BookieClient`` and ``AddStream``, whose
stream call is replaced by one that answers every message at once with an EOK per add. Encode,
submit, the stream's batching and the per-message completion run as in production; sockets,
framing and the bookies do not. For before/after comparisons of client changes on a busy box
(docs/cost-model.md), where a cluster run's figures move with the neighbours::

    PYTHONPATH=proto:metadata:server:client:cli:. python scripts/client_add_path.py [ROUNDS] [--batch]

Each round writes 100,000 entries (ENTRIES in the environment changes it) with at most 2,000
outstanding, each burst one ``append_with_callback`` per entry, or with ``--batch`` one
``append_batch_async`` (one future); the minimum is the figure.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.support.write_world import make_world, new_ledger

from bkclient.add_stream import AddStream
from bkclient.bookie_client import BookieClient
from bkclient.transport import BookieAddress, BookieConnection, BookieConnectionPool
from bkclient.write_handle import WriteHandle
from bkproto.v1 import bookie_pb2
from pybk import event_loop

ENTRIES = int(os.environ.get("ENTRIES", "100000"))
OUTSTANDING = 2_000


class AnsweringCall:
    """A stream call (``write``/``read``/``cancel``) answering each message with all-EOK results."""

    def __init__(self) -> None:
        self.stream: AddStream | None = None
        self._answers: asyncio.Queue[bytes] = asyncio.Queue()
        self._encoded: dict[int, bytes] = {}

    async def write(self, message: bytes) -> None:
        assert self.stream is not None
        count = len(self.stream._inflight[-1][0])  # the adds of the message just taken
        answer = self._encoded.get(count)
        if answer is None:
            results = [bookie_pb2.AddResponse()] * count
            answer = self._encoded[count] = bookie_pb2.AddEntriesResponse(results=results).SerializeToString()
        await asyncio.sleep(0)  # a socket write yields to the loop
        self._answers.put_nowait(answer)

    async def read(self) -> Any:
        return bookie_pb2.AddEntriesResponse.FromString(await self._answers.get())

    def cancel(self) -> None:
        pass


def connect(bookie_id: str, address: BookieAddress) -> BookieConnection:
    client = BookieClient(bookie_id, "127.0.0.1:1")  # the channel never connects: no call uses it

    def open_stream() -> AddStream:
        call = AnsweringCall()
        stream = client._stream = AddStream(bookie_id, client.options, call, client._stream_failed)
        call.stream = stream
        return stream

    client._open_stream = open_stream  # type: ignore[method-assign]
    return client


async def one_round(batch: bool) -> float:
    world = make_world(bookies=3, max_outstanding_adds=OUTSTANDING, max_outstanding_bytes=1 << 30)
    ledger_id, versioned, digest = new_ledger(world)
    pool = BookieConnectionPool(connect)
    world.ctx.bookie = pool.get  # type: ignore[method-assign]
    handle = WriteHandle(world.ctx, ledger_id, versioned, digest)
    payload = os.urandom(1024)
    room = asyncio.Event()
    completed = outstanding = 0

    def done(entry_id: int, error: object) -> None:
        nonlocal completed, outstanding
        assert error is None, error
        completed += 1
        outstanding -= 1
        room.set()

    def batch_done(count: int) -> Callable[[asyncio.Future[int]], None]:
        def batch_completed(future: asyncio.Future[int]) -> None:
            nonlocal completed, outstanding
            assert future.exception() is None, future.exception()
            completed += count
            outstanding -= count
            room.set()

        return batch_completed

    cpu = time.process_time()
    sent = 0
    while sent < ENTRIES:
        while outstanding >= OUTSTANDING:
            room.clear()
            await room.wait()
        burst = min(OUTSTANDING - outstanding, ENTRIES - sent)
        if batch:
            handle.append_batch_async([payload] * burst).add_done_callback(batch_done(burst))
        for _ in range(0 if batch else burst):
            handle.append_with_callback(payload, done)
        sent += burst
        outstanding += burst
        await asyncio.sleep(0)
    while completed < ENTRIES:
        room.clear()
        await room.wait()
    cpu = time.process_time() - cpu
    await handle.abort()
    await pool.close()
    return cpu / ENTRIES * 1e6


def main() -> None:
    gc.set_threshold(20_000, 10, 10)  # as every pybk command sets it (pybk/gc_setting.py)
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    rounds = int(numbers[0]) if numbers else 3
    batch = "--batch" in sys.argv[1:]
    figures = [event_loop.run(one_round(batch)) for _ in range(rounds)]
    rounds_text = " ".join(f"{f:.2f}" for f in figures)
    print(f"client add path: {rounds_text} µs CPU per entry, min {min(figures):.2f}")


if __name__ == "__main__":
    main()
