"""``pybk bench reads``: catch-up read of a closed ledger (throughput), plus the latency of single
random entry reads.

Without ``--ledger`` the benchmark first writes ``--entries`` entries to a new ledger (E/Qw/Qa as
given), closes it, and then reads it end to end with a fresh client, so nothing is served from the
writer's memory. The reader fetches chunks of consecutive entries with ReadEntries when E == Qw,
and E strided chunks per block when the ledger is striped (``read_calls`` in the result).
Throughput is the catch-up read, and ``first_entry_ms`` how long it took to bring its first
entry; ``latency_ms`` is measured on ``--samples`` sequential reads of random single entries (a
catch-up read has no per-entry latency worth reporting). The per-second series covers both: the
catch-up read's entries per second, then the sampled reads with their latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
from time import monotonic
from typing import Any

from bkclient import BookKeeper, ClientConfig, DigestType
from pybk import event_loop
from pybk.arg_types import non_negative, positive
from pybk.progress import Progress

from .plot import add_plot_option, print_and_plot
from .report import BenchResult, LatencyRecorder

log = logging.getLogger(__name__)


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "reads", help="catch-up read of a closed ledger, and single-entry read latency"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("--ledger", type=non_negative,
                        help="read this existing ledger instead of writing one")
    parser.add_argument("--password", default="bench", help="ledger password (default: bench)")
    parser.add_argument("-e", "--ensemble", type=positive, default=3, help="ensemble size E (default 3)")
    parser.add_argument("-w", "--write-quorum", type=positive, default=3, help="write quorum Qw (default 3)")
    parser.add_argument("-a", "--ack-quorum", type=positive, default=2, help="ack quorum Qa (default 2)")
    parser.add_argument("--size", type=positive, default=1024, help="entry size in bytes (default 1024)")
    parser.add_argument(
        "--entries", type=positive, default=100_000, help="entries to write, then read (default 100000)"
    )
    parser.add_argument(
        "--samples", type=positive, default=500, help="random single-entry reads for latency (default 500)"
    )
    parser.add_argument(
        "--digest", choices=[d.name.lower() for d in DigestType], default="crc32c", help="digest type"
    )
    add_plot_option(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(run_reads(args))
    print_and_plot(result, args, "bench reads")
    return 1 if result.errors else 0


async def write_ledger(args: argparse.Namespace) -> int:
    """A closed ledger of ``args.entries`` entries of ``args.size`` random bytes."""
    config = ClientConfig(max_outstanding_adds=5000, max_outstanding_bytes=max(64 << 20, 10_000 * args.size))
    payload = os.urandom(args.size)
    async with await BookKeeper.connect(args.zk, config) as bk:
        handle = await bk.create_ledger(
            args.ensemble,
            args.write_quorum,
            args.ack_quorum,
            DigestType[args.digest.upper()],
            args.password.encode(),
        )
        with Progress(args.entries, description="writing", quiet=args.json) as progress:
            window: list[asyncio.Future[int]] = []
            for i in range(args.entries):
                window.append(handle.append_async(payload))
                if len(window) >= 2000:
                    await asyncio.gather(*window)
                    window.clear()
                    progress.update(i + 1)
            await asyncio.gather(*window)
        await handle.close()
        return handle.ledger_id


async def run_reads(args: argparse.Namespace) -> BenchResult:
    ledger_id = args.ledger if args.ledger is not None else await write_ledger(args)
    async with await BookKeeper.connect(args.zk) as bk:
        handle = await bk.open_ledger(ledger_id, args.password.encode(), recovery=False)
        last = handle.last_add_confirmed
        if last < 0:
            raise SystemExit(f"ledger {ledger_id} has no confirmed entries")
        count = 0
        size = 0
        started = monotonic()
        first_entry_s = 0.0
        recorder = LatencyRecorder(started)
        with Progress(last + 1, description="reading", quiet=args.json) as progress:
            async for entry in handle.read(0, last):
                if not count:
                    first_entry_s = monotonic() - started
                count += 1
                size += len(entry.data)
                if count % 4096 == 0:
                    recorder.count(monotonic(), 4096)
                    progress.update(count)
        recorder.count(monotonic(), count % 4096)
        elapsed = monotonic() - started
        errors = 0 if count == last + 1 else 1
        rng = random.Random(ledger_id)
        samples = min(args.samples, last + 1)
        for _ in range(samples):
            entry_id = rng.randint(0, last)
            t0 = monotonic()
            await handle.read_entry(entry_id)
            now = monotonic()
            recorder.record((now - t0) * 1000.0, now)
        recorder.finish(monotonic())
        md = handle.metadata
    return BenchResult(
        entries=count,
        errors=errors,
        elapsed_s=elapsed,
        entry_size=size // count if count else args.size,
        latencies=recorder,
        extra={
            "ledger_id": ledger_id,
            "ensemble": md.ensemble_size,
            "write_quorum": md.write_quorum_size,
            "ack_quorum": md.ack_quorum_size,
            "read_calls": "chunks" if md.ensemble_size == md.write_quorum_size else "strided chunks",
            # how long the catch-up read took to bring its first entry (connections included)
            "first_entry_ms": round(first_entry_s * 1000.0, 2),
            "latency": f"{samples} sequential random single-entry reads",
        },
    )
