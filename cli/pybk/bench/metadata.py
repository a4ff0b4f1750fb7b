"""``pybk bench metadata``: ledger metadata create (id + znode) and read rates against ZooKeeper.

Timed phases with ``--concurrency`` coroutines sharing one ZooKeeper session, as a client would:
create (``generate_ledger_id`` + ``create_ledger_metadata``); read (the first read of each created
ledger through ``read_ledger_metadata_cached``, as ``open_ledger(recovery=False)`` does: the
creator does not fill the cache, so every one of these is a ZooKeeper read, which also sets the
cache's watch); reread (the same reads again, answered by the watched cache, as a client re-opening
ledgers it opened before and that nobody changed since); and delete. The work runs under a private
ledgers root (``/pybk-bench-<random>/ledgers``) removed at the end, so a live cluster is untouched.
The main result is the create phase; ``read``, ``reread_cached`` and ``delete`` carry the same
report shape, ``cache`` the hits and misses the reads saw.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bkmeta import DigestType, LedgerMetadata, LedgerState, MetadataClient, Segment, init_new_cluster
from pybk import event_loop
from pybk.arg_types import positive
from pybk.progress import Progress

from .plot import add_plot_option, print_and_plot
from .report import BenchResult, LatencyRecorder

log = logging.getLogger(__name__)

ENSEMBLE = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "metadata", help="ledger metadata create and read rates against ZooKeeper"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("--ops", type=positive, default=5000,
                        help="ledgers to create, then read (default 5000)")
    parser.add_argument("--concurrency", type=positive, default=64,
                        help="concurrent async calls (default 64)")
    add_plot_option(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(run_metadata_bench(args.zk, args.ops, args.concurrency, args.json))
    print_and_plot(result, args, "bench metadata (creates)")
    return 1 if result.errors else 0


def sample_metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        state=LedgerState.OPEN,
        last_entry_id=-1,
        length=0,
        digest_type=DigestType.CRC32C,
        password=b"bench",
        ctime=int(time.time() * 1000),
        custom_metadata={"application": b"pybk-bench"},
        segments=(Segment(0, ENSEMBLE),),
    )


async def _phase(
    name: str, ops: int, concurrency: int, op: Callable[[int], Awaitable[None]], as_json: bool = False
) -> BenchResult:
    """Run ``op(i)`` for i in 0..ops-1 with ``concurrency`` workers; latency per op."""
    latencies = LatencyRecorder(time.perf_counter())
    errors = 0
    next_index = 0
    progress = Progress(ops, unit="ops", description=name, quiet=as_json)

    async def worker() -> None:
        nonlocal next_index, errors
        while next_index < ops:
            i = next_index
            next_index += 1
            t0 = time.perf_counter()
            try:
                await op(i)
            except Exception as e:  # counted and reported, never hidden  # noqa: BLE001
                errors += 1
                if errors <= 3:
                    log.warning("%s %d failed: %s", name, i, e)
                continue
            now = time.perf_counter()
            latencies.record((now - t0) * 1000.0, now)
            progress.advance()

    start = time.perf_counter()
    latencies = LatencyRecorder(start)
    await asyncio.gather(*(worker() for _ in range(min(concurrency, ops))))
    end = time.perf_counter()
    latencies.finish(end)
    progress.done()
    return BenchResult(entries=latencies.total_count, errors=errors, elapsed_s=end - start, entry_size=0,
                       latencies=latencies)


async def run_metadata_bench(zk_hosts: str, ops: int, concurrency: int, as_json: bool = False) -> BenchResult:
    root = f"/pybk-bench-{uuid.uuid4().hex[:8]}"
    meta = await MetadataClient.connect(
        zk_hosts, f"{root}/ledgers", require_cluster=False, watch_bookies=False
    )
    try:
        await init_new_cluster(meta.zk, meta.layout)
        lm = meta.ledger_manager
        md = sample_metadata()
        ids: list[int] = [0] * ops

        async def create(i: int) -> None:
            ids[i] = await lm.generate_ledger_id()
            await lm.create_ledger_metadata(ids[i], md)

        async def read(i: int) -> None:
            versioned = await lm.read_ledger_metadata_cached(ids[i])
            if versioned.value != md:
                raise AssertionError(f"ledger {ids[i]} read back different metadata")

        async def delete(i: int) -> None:
            await lm.remove_ledger_metadata(ids[i])

        creates = await _phase("create", ops, concurrency, create, as_json)
        reads = await _phase("read", ops, concurrency, read, as_json)
        cache = lm.cache
        cold = {"hits": cache.hits, "misses": cache.misses}
        rereads = await _phase("reread", ops, concurrency, read, as_json)
        warm = {"hits": cache.hits - cold["hits"], "misses": cache.misses - cold["misses"]}
        deletes = await _phase("delete", ops, concurrency, delete, as_json)
        creates.extra = {
            "concurrency": concurrency,
            "read": reads.as_dict(with_series=False),
            "reread_cached": rereads.as_dict(with_series=False),
            "cache": {"read": cold, "reread": warm, "capacity": cache.capacity},
            "phases": {
                "create": "generate_ledger_id + create_ledger_metadata (the creator does not fill the cache)",
                "read": "first read of each ledger by this client: a ZooKeeper getData each, with a watch",
                "reread_cached": "the same ledgers read again, unchanged: answered by the watched cache",
                "delete": "remove_ledger_metadata",
            },
            "delete": deletes.as_dict(with_series=False),
        }
        return creates
    finally:
        try:
            await meta.zk.delete_recursive(root)
        finally:
            await meta.close()
