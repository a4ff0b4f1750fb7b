"""The adds of ``pybk bench bookie``: its stream messages, made by the client's own encoder
(``bkclient.add_stream.AddRequestEncoder``), sent over one AddEntries stream (the bookie's add port
through ``bkclient.add_port_call.AddPortCall``, or gRPC), pipelined or one add at a time, and
the answers counted.

Two wires. ``packed`` is what the client library sends: a message's adds, all of one ledger, as
one ``PackedAdds`` group, and ``count_ok`` set, so that an answer counts its leading successes
(``ok_count``) and has a result only for each add after them; a lone add goes as one ``adds``
element with ``count_ok``, as the client sends it. ``per-add`` is the bench's earlier form: one
``AddRequest`` element per add and a result per add (the same bytes protobuf made of it then).

Entries are BookKeeper v3 bodies (32-byte header, an 8-byte stand-in digest, the payload): the
bookie does not verify digests.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import grpc.aio

from bkclient.add_stream import AddRequestEncoder
from bkclient.grpc_add_call import GrpcAddCall
from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bkproto.wire import COUNT_OK
from pybk.bench.report import LatencyRecorder
from pybk.progress import Progress

PACKED = "packed"
PER_ADD = "per-add"
WIRES = (PACKED, PER_ADD)
MASTER_KEY = b"pybk-bench-bookie-key"[:20]
DIGEST = b"\0" * 8


class AddCall(Protocol):
    """One AddEntries stream, as grpc.aio's call and ``AddPortCall`` both are: serialized
    requests written, ``AddEntriesResponse`` (or ``grpc.aio.EOF``) read, in order."""

    async def write(self, message: bytes) -> None: ...

    async def read(self) -> Any: ...

    def cancel(self) -> Any: ...


class AddMessages:
    """Stream messages of adds to one ledger, entries of ``size`` bytes of payload, in ``wire``."""

    def __init__(self, wire: str, ledger_id: int, payload: bytes) -> None:
        if wire not in WIRES:
            raise ValueError(f"unknown wire {wire!r}")
        self._packed = wire == PACKED
        self._ledger_id = ledger_id
        self._payload = payload
        self._encoder = AddRequestEncoder(ledger_id, MASTER_KEY)

    def body(self, entry_id: int) -> bytes:
        """Entry ``entry_id``'s body (its LAC the entry before, its length the ledger's)."""
        header = HEADER.pack(self._ledger_id, entry_id, entry_id - 1, (entry_id + 1) * len(self._payload))
        return b"".join((header, DIGEST, self._payload))

    def message(self, first_entry_id: int, count: int) -> bytes:
        """The serialized AddEntriesRequest of entries ``first_entry_id`` .. ``+ count - 1``."""
        entry_ids = range(first_entry_id, first_entry_id + count)
        bodies = [self.body(entry_id) for entry_id in entry_ids]
        encoder = self._encoder
        if not self._packed:
            encode = encoder.encode
            return b"".join([encode(eid, body) for eid, body in zip(entry_ids, bodies, strict=True)])
        if count == 1:  # a lone add: an ``adds`` element, as the client's add stream sends it
            return encoder.encode(first_entry_id, bodies[0], trailer=COUNT_OK)
        return encoder.pack(entry_ids, bodies, COUNT_OK)


class AnswerTally:
    """Adds acknowledged and failed, from the answers of messages: an answer counts its leading
    successes (``ok_count``) and has a result for each add after them. An answer for more or
    fewer adds than its message carried says nothing about which succeeded: all of its adds
    count as failed."""

    def __init__(self) -> None:
        self.acked = 0
        self.errors = 0
        self.first_error = ""

    def count(self, response: Any, adds: int) -> None:
        """Account the answer ``response`` to a message of ``adds`` adds; RuntimeError if the
        bookie ended the stream instead."""
        if not isinstance(response, bookie_pb2.AddEntriesResponse):  # grpc.aio.EOF
            raise RuntimeError("the bookie ended the add stream early")
        ok = response.ok_count
        results = response.results
        if ok + len(results) != adds:
            self._failed(adds, f"an answer for {ok + len(results)} adds to a message of {adds}")
            return
        failed = [result for result in results if result.status != bookie_pb2.EOK]
        self.acked += adds - len(failed)
        if failed:
            first = failed[0]
            self._failed(len(failed), f"{bookie_pb2.StatusCode.Name(first.status)}: {first.message}")

    def _failed(self, adds: int, why: str) -> None:
        self.errors += adds
        self.first_error = self.first_error or why


async def _end(call: AddCall) -> None:
    """Half-close a gRPC stream whose answers all came (the add port's ends with the connection)."""
    done_writing: Callable[[], Any] | None = getattr(call, "done_writing", None)
    if done_writing is not None:
        await done_writing()


class PipelinedAdds:
    """One stream with at most ``window`` adds outstanding, ``batch`` adds per message; each add's
    latency is from its message being sent to the message's answer."""

    def __init__(self, open_call: Callable[[], AddCall], window: int, batch: int) -> None:
        self._open_call = open_call
        self._window = window
        self._batch = min(batch, window)
        self.latencies = LatencyRecorder(time.perf_counter())
        self.answers = AnswerTally()

    async def run(self, messages: AddMessages, count: int, progress: Progress | None = None) -> float:
        """Add entries 0 .. ``count - 1``; returns the seconds from the first send to the last answer."""
        call = self._open_call()
        sent: deque[tuple[float, int]] = deque()
        room = asyncio.Event()
        room.set()
        outstanding = 0
        done = 0

        async def receive() -> None:
            nonlocal outstanding, done
            try:
                while done < count:
                    response = await call.read()
                    now = time.perf_counter()
                    sent_at, n = sent.popleft()
                    self.answers.count(response, n)
                    self.latencies.record((now - sent_at) * 1000.0, now, n)
                    outstanding -= n
                    done += n
                    room.set()
                    if progress is not None:
                        progress.update(done)
            finally:
                room.set()  # a sender waiting for room learns that no answer will come

        start = time.perf_counter()
        self.latencies = LatencyRecorder(start)
        receiver = asyncio.create_task(receive())
        entry_id = 0
        try:
            while entry_id < count:
                n = min(self._batch, count - entry_id)
                while outstanding + n > self._window:
                    if receiver.done():
                        receiver.result()  # the stream failed: raise why
                        raise RuntimeError("the answers ended before every add was sent")
                    room.clear()
                    await room.wait()
                message = messages.message(entry_id, n)
                outstanding += n
                sent.append((time.perf_counter(), n))
                await call.write(message)
                entry_id += n
            await receiver
            await _end(call)
        finally:
            receiver.cancel()
            call.cancel()
        end = time.perf_counter()
        self.latencies.finish(end)
        return end - start


async def single_adds(
    open_call: Callable[[], AddCall], messages: AddMessages, count: int
) -> tuple[LatencyRecorder, AnswerTally]:
    """Add entries 0 .. ``count - 1`` one at a time over one stream: each message is sent once the
    previous one's answer came. Returns each add's latency and the answers' tally."""
    call = open_call()
    latencies = LatencyRecorder(time.perf_counter())
    answers = AnswerTally()
    try:
        for entry_id in range(count):
            message = messages.message(entry_id, 1)
            start = time.perf_counter()
            await call.write(message)
            response = await call.read()
            now = time.perf_counter()
            latencies.record((now - start) * 1000.0, now)
            answers.count(response, 1)
        await _end(call)
    finally:
        call.cancel()
    latencies.finish(time.perf_counter())
    return latencies, answers


def grpc_add_calls(channel: grpc.aio.Channel) -> Callable[[], AddCall]:
    """Opens AddEntries calls on ``channel`` that take serialized requests, as the client's do
    (and, as the client's, write only once the bookie took the call)."""
    method = channel.stream_stream(
        "/bkproto.v1.Bookie/AddEntries",
        request_serializer=None,
        response_deserializer=bookie_pb2.AddEntriesResponse.FromString,
    )
    return lambda: GrpcAddCall(method())  # type: ignore[call-arg]  # grpc.aio writes to the call itself
