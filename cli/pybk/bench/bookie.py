"""``pybk bench bookie``: adds straight to one bookie over the AddEntries stream (BookKeeper's BenchBookie).

Three phases on fresh ledgers:

1. warm-up: ``--warmup`` entries, pipelined, not reported;
2. throughput: ``--entries`` entries pipelined over one stream, ``--batch`` entries per message and
   at most ``--window`` entries outstanding; each entry's latency is from its message being sent
   to the message's response;
3. latency: ``--latency-entries`` entries with a single add outstanding (one entry per message).

Entries are BookKeeper v3 bodies (32-byte header, an 8-byte stand-in digest, ``--size`` bytes of
payload): the bookie does not verify digests. The report is the throughput phase; the latency
phase is added as ``single_add_latency_ms`` (same percentiles).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import deque
from typing import Any

import grpc
import grpc.aio

from bkclient.tls import security_from_environ
from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from pybk.arg_types import non_negative, positive
from pybk.bench.plot import add_plot_option, print_and_plot
from pybk.bench.report import BenchResult, LatencyRecorder, summary_ms
from pybk.progress import Progress

MiB = 1024 * 1024
MASTER_KEY = b"pybk-bench-bookie-key"[:20]
DIGEST = b"\0" * 8
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 16 * MiB),
    ("grpc.max_receive_message_length", 16 * MiB),
]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bookie", help="add throughput and latency of one bookie (like BookKeeper's BenchBookie)"
    )
    parser.add_argument("--bookie", required=True, help="HOST:PORT of the bookie")
    parser.add_argument("--entries", type=positive, default=100_000, help="entries in the throughput phase")
    parser.add_argument("--size", type=positive, default=1024, help="payload bytes per entry")
    parser.add_argument("--window", type=positive, default=10_000, help="max entries outstanding")
    parser.add_argument("--batch", type=positive, default=500, help="max entries per stream message")
    parser.add_argument("--latency-entries", type=non_negative, default=2000, help="single-outstanding adds")
    parser.add_argument("--warmup", type=non_negative, default=2000, help="warm-up entries (not reported)")
    add_plot_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_bench(args))


class EntryMaker:
    def __init__(self, size: int) -> None:
        self._payload = os.urandom(size)
        self._length = len(self._payload)

    def add(self, request: bookie_pb2.AddEntriesRequest, ledger_id: int, entry_id: int) -> None:
        body = HEADER.pack(ledger_id, entry_id, entry_id - 1, (entry_id + 1) * self._length)
        request.adds.add(
            ledger_id=ledger_id, entry_id=entry_id, master_key=MASTER_KEY, body=body + DIGEST + self._payload
        )


class PipelinedAdds:
    """One AddEntries stream with at most ``window`` entries outstanding."""

    def __init__(self, stub: bookie_pb2_grpc.BookieStub, maker: EntryMaker, window: int, batch: int) -> None:
        self._stub = stub
        self._maker = maker
        self._window = window
        self._batch = min(batch, window)
        self.latencies = LatencyRecorder(time.perf_counter())
        self.errors = 0
        self.first_error = ""

    async def run(self, ledger_id: int, count: int, progress: Progress | None = None) -> float:
        """Add ``count`` entries; returns the elapsed seconds from first send to last response."""
        call = self._stub.AddEntries()
        sent: deque[tuple[float, int]] = deque()
        room = asyncio.Event()
        room.set()
        outstanding = 0
        done = 0

        async def receive() -> None:
            nonlocal outstanding, done
            while done < count:
                response = await call.read()
                if not isinstance(response, bookie_pb2.AddEntriesResponse):  # grpc.aio.EOF
                    raise RuntimeError("the bookie ended the add stream early")
                now = time.perf_counter()
                sent_at, n = sent.popleft()
                self.latencies.record((now - sent_at) * 1000.0, now, n)
                for result in response.results:
                    if result.status != bookie_pb2.EOK:
                        self.errors += 1
                        self.first_error = self.first_error or (
                            f"{bookie_pb2.StatusCode.Name(result.status)}: {result.message}"
                        )
                outstanding -= n
                done += n
                room.set()
                if progress is not None:
                    progress.update(done)

        start = time.perf_counter()
        self.latencies = LatencyRecorder(start)
        receiver = asyncio.create_task(receive())
        entry_id = 0
        try:
            while entry_id < count:
                n = min(self._batch, count - entry_id)
                while outstanding + n > self._window:
                    room.clear()
                    await room.wait()
                request = bookie_pb2.AddEntriesRequest()
                for eid in range(entry_id, entry_id + n):
                    self._maker.add(request, ledger_id, eid)
                outstanding += n
                sent.append((time.perf_counter(), n))
                await call.write(request)
                entry_id += n
            await call.done_writing()
            await receiver
        finally:
            receiver.cancel()
            call.cancel()
        end = time.perf_counter()
        self.latencies.finish(end)
        return end - start


async def _single_adds(
    stub: bookie_pb2_grpc.BookieStub, maker: EntryMaker, ledger_id: int, count: int
) -> LatencyRecorder:
    call = stub.AddEntries()
    latencies = LatencyRecorder(time.perf_counter())
    try:
        for entry_id in range(count):
            request = bookie_pb2.AddEntriesRequest()
            maker.add(request, ledger_id, entry_id)
            start = time.perf_counter()
            await call.write(request)
            response = await call.read()
            now = time.perf_counter()
            latencies.record((now - start) * 1000.0, now)
            if (
                not isinstance(response, bookie_pb2.AddEntriesResponse)
                or response.results[0].status != bookie_pb2.EOK
            ):
                raise RuntimeError(f"single add {entry_id} failed: {response}")
        await call.done_writing()
    finally:
        call.cancel()
    latencies.finish(time.perf_counter())
    return latencies


async def _bench(args: argparse.Namespace) -> int:
    maker = EntryMaker(args.size)
    base = random.randrange(1 << 40, 1 << 50)
    security = security_from_environ()  # a TLS bookie: PYBK_CLIENT_CONF / BK_<key> (bkclient.tls)
    channel = (
        grpc.aio.secure_channel(args.bookie, security.grpc_credentials(), options=CHANNEL_OPTIONS)
        if security is not None and security.tls
        else grpc.aio.insecure_channel(args.bookie, options=CHANNEL_OPTIONS)
    )
    async with channel:
        stub = bookie_pb2_grpc.BookieStub(channel)  # type: ignore[no-untyped-call]
        try:
            await asyncio.wait_for(channel.channel_ready(), 10)
        except TimeoutError:
            print(f"pybk bench bookie: cannot connect to {args.bookie}", file=sys.stderr)
            return 1
        if args.warmup:
            await PipelinedAdds(stub, maker, args.window, args.batch).run(base, args.warmup)
        adds = PipelinedAdds(stub, maker, args.window, args.batch)
        with Progress(args.entries, quiet=args.json) as progress:
            elapsed = await adds.run(base + 1, args.entries, progress)
        single = await _single_adds(stub, maker, base + 2, args.latency_entries)
    result = BenchResult(
        entries=args.entries - adds.errors,
        errors=adds.errors,
        elapsed_s=elapsed,
        entry_size=args.size,
        latencies=adds.latencies,
        extra={
            "window": args.window,
            "batch": min(args.batch, args.window),
            "single_add_latency_ms": summary_ms(single.histogram),
        },
    )
    if adds.first_error:
        result.extra["first_error"] = adds.first_error
    print_and_plot(result, args, f"bench bookie {args.bookie}")
    return 0 if adds.errors == 0 else 1
