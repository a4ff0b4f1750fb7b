"""``pybk bench journal-disk``: how the disk under a journal directory answers small synced writes.

A bookie acknowledges an add only after its journal's ``fdatasync``, so the journal disk's worst
syncs become every writer's worst adds, and with Qw = Qa each entry waits for its slowest copy.
This writes what the journal writes: a preallocated file, small records, one ``pwrite`` plus one
``fdatasync`` each, paced by ``--interval-ms``. Besides the percentiles it reports how much of the
run was spent inside syncs slower than ``--stall-ms`` (``stalled_time_pct``). No add latency
percentile can be below ``--stall-ms`` once more than 1 % (p99) of the time is stalled, whatever
the bookie does, which is why BookKeeper recommends a dedicated journal device.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pybk.arg_types import existing_dir, non_negative_float, positive, positive_float

from .plot import add_plot_option, print_and_plot
from .report import BenchResult, LatencyRecorder

MiB = 1024 * 1024
_PREALLOC_BYTES = 64 * MiB


def _record_size(text: str) -> int:
    size = positive(text)
    if size > _PREALLOC_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most {_PREALLOC_BYTES} bytes, got {size}")
    return size


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "journal-disk", help="fdatasync latency and stall time of the disk under a journal dir"
    )
    parser.add_argument("--dir", required=True, type=existing_dir, help="directory on the disk to test")
    parser.add_argument("--time", type=positive_float, default=10.0, help="seconds to run (default 10)")
    parser.add_argument("--size", type=_record_size, default=4096,
                        help="bytes per synced write (default 4096)")
    parser.add_argument(
        "--interval-ms", type=non_negative_float, default=1.0, help="pause between writes, ms (default 1)"
    )
    parser.add_argument(
        "--stall-ms", type=positive_float, default=20.0,
        help="a sync slower than this is a stall (default 20)"
    )
    add_plot_option(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = run_probe(args.dir, args.time, args.size, args.interval_ms / 1000.0, args.stall_ms)
    print_and_plot(result, args, "bench journal-disk")
    return 0


def run_probe(directory: Path, seconds: float, size: int, interval_s: float, stall_ms: float) -> BenchResult:
    path = directory / f".pybk-journal-disk-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _preallocate(fd)
        record = os.urandom(size)
        offset = 0
        writes = 0
        stalls = 0
        stalled_ms = 0.0
        started = time.perf_counter()
        latencies = LatencyRecorder(started)
        deadline = started + seconds
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            os.pwrite(fd, record, offset)
            os.fdatasync(fd)
            now = time.perf_counter()
            ms = (now - t0) * 1000.0
            latencies.record(ms, now)
            writes += 1
            if ms > stall_ms:
                stalls += 1
                stalled_ms += ms
            offset = (offset + size) % (_PREALLOC_BYTES - size + 1)
            if interval_s > 0:
                time.sleep(interval_s)
        end = time.perf_counter()
        latencies.finish(end)
        elapsed = end - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    extra: dict[str, Any] = {
        "size": size,
        "interval_ms": interval_s * 1000.0,
        "stall_ms": stall_ms,
        "stalls": stalls,
        "stalled_time_pct": round(stalled_ms / 10.0 / elapsed, 2) if elapsed > 0 else 0.0,
    }
    return BenchResult(writes, 0, elapsed, size, latencies, extra)


def _preallocate(fd: int) -> None:
    """Zero-fill and sync, as the journal does, so each sync commits data only."""
    chunk = bytes(MiB)
    for pos in range(0, _PREALLOC_BYTES, MiB):
        os.pwrite(fd, chunk, pos)
    os.fsync(fd)
