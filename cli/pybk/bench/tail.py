"""``pybk bench tail``: a steady writer and a tailing reader; latency = writer's ack -> reader's
receipt of the same entry.

The writer appends ``--rate`` entries per second (paced, not bursty) through one client; the reader
follows the ledger with ``ReadHandle.tail`` in its own process (or, with ``--same-process``, through
a second client on the writer's event loop). Both stamp times with the system-wide monotonic clock.
An entry becomes visible to readers once its LAC reaches a bookie, piggybacked on a later entry;
bookies publish that LAC as soon as the carrying entry arrives (before its journal fsync), so the
floor of this latency is about one inter-arrival gap plus a bookie hop. The writer's own add
latency is reported next to it (``writer_add_latency_ms``, from each add's scheduled send time,
so a writer held back by a stall counts the wait: coordinated omission): a slow disk delays acks,
and this figure starts at the ack. The final entry only becomes visible when the ledger is closed and is
left out of the latency figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from time import monotonic
from typing import Any

from bkclient import BookKeeper, DigestType
from pybk import event_loop
from pybk.arg_types import positive, positive_float
from pybk.progress import Progress

from .plot import add_plot_option, print_and_plot
from .report import BenchResult, LatencyRecorder, summary_ms

log = logging.getLogger(__name__)

PASSWORD = b"bench"


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "tail", help="writer-ack to tailing-reader-receipt latency at a steady write rate"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("-e", "--ensemble", type=positive, default=3, help="ensemble size E (default 3)")
    parser.add_argument("-w", "--write-quorum", type=positive, default=2, help="write quorum Qw (default 2)")
    parser.add_argument("-a", "--ack-quorum", type=positive, default=2, help="ack quorum Qa (default 2)")
    parser.add_argument("--size", type=positive, default=1024, help="entry size in bytes (default 1024)")
    parser.add_argument("--rate", type=positive_float, default=1000.0,
                        help="entries per second (default 1000)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--entries", type=positive, help="number of entries to write")
    amount.add_argument("--time", type=positive_float, help="seconds to write for")
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="run the reader on the writer's event loop instead of in its own process",
    )
    add_plot_option(parser)
    parser.set_defaults(func=main)


async def _receive(conn: Connection, ready: asyncio.Event) -> list[tuple[int, float]]:
    """The reader process's "ready", then its receipts (or its failure)."""
    first = await asyncio.to_thread(conn.recv)
    if first != "ready":
        raise SystemExit(f"bench tail: {first}")
    ready.set()
    result = await asyncio.to_thread(conn.recv)
    if isinstance(result, str):
        raise SystemExit(f"bench tail: {result}")
    return list(result)


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(run_tail(args))
    print_and_plot(result, args, "bench tail")
    return 1 if result.errors else 0


async def _follow(zk: str, ledger_id: int, ready: Callable[[], None]) -> list[tuple[int, float]]:
    """Tail the ledger to its close; (entry id, receipt time on the monotonic clock) per entry."""
    receipts: list[tuple[int, float]] = []
    async with await BookKeeper.connect(zk) as bk:
        reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
        ready()
        async for entry in reader.tail(0):
            receipts.append((entry.entry_id, monotonic()))
    return receipts


def _reader_process(zk: str, ledger_id: int, conn: Connection) -> None:
    """Entry point of the reader process: its own interpreter, event loop and connections."""
    try:
        conn.send(event_loop.run(_follow(zk, ledger_id, lambda: conn.send("ready"))))
    except BaseException as exc:  # report instead of dying silently; the parent counts an error
        conn.send(f"reader failed: {exc!r}")
        raise
    finally:
        conn.close()


async def run_tail(args: argparse.Namespace) -> BenchResult:
    total = args.entries if args.entries is not None else int(args.time * args.rate)
    payload = os.urandom(args.size)
    acked_at: dict[int, float] = {}
    add_latencies = LatencyRecorder(monotonic())
    errors = 0

    def on_ack(due: float, future: asyncio.Future[int]) -> None:
        nonlocal errors
        if future.exception() is None:
            now = monotonic()
            acked_at[future.result()] = now
            add_latencies.record((now - due) * 1000.0, now)
        else:
            errors += 1

    async with await BookKeeper.connect(args.zk) as writer_bk:
        handle = await writer_bk.create_ledger(
            args.ensemble, args.write_quorum, args.ack_quorum, DigestType.CRC32C, PASSWORD
        )
        ready = asyncio.Event()
        process: BaseProcess | None = None
        if args.same_process:
            follower = asyncio.ensure_future(_follow(args.zk, handle.ledger_id, ready.set))
        else:
            parent, child = multiprocessing.get_context("spawn").Pipe()
            process = multiprocessing.get_context("spawn").Process(
                target=_reader_process, args=(args.zk, handle.ledger_id, child), daemon=True
            )
            process.start()
            child.close()
            follower = asyncio.ensure_future(_receive(parent, ready))
        await asyncio.wait_for(ready.wait(), 60)
        progress = Progress(total, quiet=args.json)
        interval = 1.0 / args.rate
        started = monotonic()
        add_latencies = LatencyRecorder(started)
        pending: list[asyncio.Future[int]] = []
        for i in range(total):
            delay = started + i * interval - monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            future = handle.append_async(payload)
            future.add_done_callback(partial(on_ack, started + i * interval))
            pending.append(future)
            if len(pending) >= 1000:
                pending = [f for f in pending if not f.done()]
            if i % 512 == 0:
                progress.update(len(acked_at))
        await asyncio.gather(*pending, return_exceptions=True)
        await handle.close()
        receipts = await asyncio.wait_for(follower, 120)
        elapsed = monotonic() - started
        progress.done()
        if process is not None:
            await asyncio.to_thread(process.join, 30)
    received = len(receipts)
    in_order = [entry_id for entry_id, _ in receipts] == list(range(received))
    latencies = LatencyRecorder(started)  # on the receipt clock, shared by both processes
    for entry_id, at in receipts:
        if entry_id in acked_at and entry_id < total - 1:
            latencies.record(max(0.0, at - acked_at[entry_id]) * 1000.0, at)
    latencies.finish(max((at for _, at in receipts), default=started))
    add_latencies.finish(monotonic())
    writer_add = summary_ms(add_latencies.histogram)
    if received != total or not in_order:
        errors += 1
        log.error("reader received %d of %d entries (in order: %s)", received, total, in_order)
    return BenchResult(
        entries=received,
        errors=errors,
        elapsed_s=elapsed,
        entry_size=args.size,
        latencies=latencies,
        extra={
            "rate": args.rate,
            "ensemble": args.ensemble,
            "write_quorum": args.write_quorum,
            "ack_quorum": args.ack_quorum,
            "latency": "writer ack -> tailing reader receipt",
            # For context: how long the writer waited for its acks (disk stalls show here first).
            "writer_add_latency_ms": {"p50": writer_add["p50"], "p99": writer_add["p99"]},
        },
    )
