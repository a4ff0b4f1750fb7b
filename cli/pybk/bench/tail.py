"""``pybk bench tail``: a steady writer and a tailing reader; latency = writer's ack -> reader's
receipt of the same entry.

The writer appends ``--rate`` entries per second (paced, not bursty) through one client; the reader
follows the ledger with ``ReadHandle.tail`` through a second client (its own connections and
metadata session), as another process would. Both run on one event loop so their clocks agree.
An entry becomes visible to readers once its LAC reaches the bookies, piggybacked on a later entry
that the bookie has made durable, so the floor of this latency is about one add latency (reported
as ``writer_add_latency_ms``) plus one inter-arrival gap. The final entry only becomes visible when
the ledger is closed and is left out of the latency figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from functools import partial
from typing import Any

from bkclient import BookKeeper, DigestType

from .report import BenchResult, Progress, percentile

log = logging.getLogger(__name__)


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "tail", help="writer-ack to tailing-reader-receipt latency at a steady write rate"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("-e", "--ensemble", type=int, default=3, help="ensemble size E (default 3)")
    parser.add_argument("-w", "--write-quorum", type=int, default=2, help="write quorum Qw (default 2)")
    parser.add_argument("-a", "--ack-quorum", type=int, default=2, help="ack quorum Qa (default 2)")
    parser.add_argument("--size", type=int, default=1024, help="entry size in bytes (default 1024)")
    parser.add_argument("--rate", type=float, default=1000.0, help="entries per second (default 1000)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--entries", type=int, help="number of entries to write")
    amount.add_argument("--time", type=float, help="seconds to write for")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    for name in ("entries", "time", "size", "rate"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise SystemExit(f"--{name} must be > 0, got {value}")
    result = asyncio.run(run_tail(args))
    result.print(args.json, "bench tail")
    return 1 if result.errors else 0


async def run_tail(args: argparse.Namespace) -> BenchResult:
    loop = asyncio.get_running_loop()
    total = args.entries if args.entries is not None else int(args.time * args.rate)
    payload = os.urandom(args.size)
    acked_at: dict[int, float] = {}
    latencies: list[float] = []
    errors = 0
    async with await BookKeeper.connect(args.zk) as writer_bk, await BookKeeper.connect(args.zk) as reader_bk:
        handle = await writer_bk.create_ledger(
            args.ensemble, args.write_quorum, args.ack_quorum, DigestType.CRC32C, b"bench"
        )
        reader = await reader_bk.open_ledger(handle.ledger_id, b"bench", recovery=False)
        received = 0
        in_order = True

        async def follow() -> None:
            nonlocal received, in_order
            async for entry in reader.tail(0):
                now = loop.time()
                if entry.entry_id != received:
                    in_order = False
                received += 1
                acked = acked_at.pop(entry.entry_id, None)
                if acked is not None and entry.entry_id < total - 1:
                    latencies.append(max(0.0, now - acked) * 1000.0)

        add_latencies: list[float] = []

        def on_ack(sent: float, future: asyncio.Future[int]) -> None:
            nonlocal errors
            if future.exception() is None:
                now = loop.time()
                acked_at[future.result()] = now
                add_latencies.append((now - sent) * 1000.0)
            else:
                errors += 1

        tail_task = asyncio.ensure_future(follow())
        progress = Progress(total)
        interval = 1.0 / args.rate
        started = loop.time()
        pending: list[asyncio.Future[int]] = []
        for i in range(total):
            delay = started + i * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            future = handle.append_async(payload)
            future.add_done_callback(partial(on_ack, loop.time()))
            pending.append(future)
            if len(pending) >= 1000:
                pending = [f for f in pending if not f.done()]
            if i % 512 == 0:
                progress.update(received)
        await asyncio.gather(*pending, return_exceptions=True)
        await handle.close()
        await asyncio.wait_for(tail_task, 60)
        elapsed = loop.time() - started
        progress.done()
    add_sorted = sorted(add_latencies)
    if received != total or not in_order:
        errors += 1
        log.error("reader received %d of %d entries (in order: %s)", received, total, in_order)
    return BenchResult(
        entries=received,
        errors=errors,
        elapsed_s=elapsed,
        entry_size=args.size,
        latencies_ms=latencies,
        extra={
            "rate": args.rate,
            "ensemble": args.ensemble,
            "write_quorum": args.write_quorum,
            "ack_quorum": args.ack_quorum,
            "latency": "writer ack -> tailing reader receipt",
            # The floor of the tail latency: a bookie exposes a LAC once the entry carrying it is
            # durable, so an entry reaches readers about one add latency after its own ack.
            "writer_add_latency_ms": {
                "p50": round(percentile(add_sorted, 50), 3),
                "p99": round(percentile(add_sorted, 99), 3),
            },
        },
    )
