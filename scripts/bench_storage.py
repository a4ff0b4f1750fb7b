"""In-process storage micro-benchmark: N entries through Bookie.add_entries in batches, fsync on.

    .venv/bin/python scripts/bench_storage.py --entries 200000 --batch 256 --size 1024 [--inflight 4]

Measures the bookie core alone (no gRPC): entries/s and per-batch latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from pybk import event_loop

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "proto")]

from prometheus_client import CollectorRegistry  # noqa: E402

from bkproto.entry_format import HEADER  # noqa: E402
from bookie.api import AddOp  # noqa: E402
from bookie.on_disk import bookie_on_disk  # noqa: E402
from bookie.storage.config import StorageConfig  # noqa: E402


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        config = StorageConfig(
            journal_dirs=[Path(tmp) / "journal"],
            ledger_dirs=[Path(tmp) / "ledgers"],
            write_cache_max_size_mb=args.write_cache_mb,
        )
        key = b"k" * 20
        payload = b"x" * (args.size - HEADER.size)
        batches = []
        ledger = 1
        for start in range(0, args.entries, args.batch):
            ops = [
                AddOp(ledger, e, key, HEADER.pack(ledger, e, e - 1, 0) + payload)
                for e in range(start, min(args.entries, start + args.batch))
            ]
            batches.append(ops)
        async with bookie_on_disk(config, CollectorRegistry()) as bookie:
            latencies: list[float] = []
            queue = iter(batches)

            async def worker() -> None:
                for ops in queue:
                    t0 = time.perf_counter()
                    results = await bookie.add_entries(ops)
                    latencies.append(time.perf_counter() - t0)
                    assert all(r.status == 0 for r in results), results[0]

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.inflight)))
            elapsed = time.perf_counter() - started
        latencies.sort()
        p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
        print(
            f"{args.entries} entries x {args.size} B in {elapsed:.2f} s: "
            f"{args.entries / elapsed:,.0f} entries/s, "
            f"{args.entries * args.size / elapsed / 1e6:.1f} MB/s; batch latency ms p50 {p(0.5):.2f} "
            f"p99 {p(0.99):.2f} max {latencies[-1] * 1000:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--write-cache-mb", type=int, default=64)
    parser.add_argument("--dir", default=None)
    event_loop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
