"""``pybk bench metadata``: ledger metadata create (id + znode) and read rates against ZooKeeper.

Three timed phases with ``--concurrency`` coroutines sharing one ZooKeeper session, as a client
would: create (``generate_ledger_id`` + ``create_ledger_metadata``), read
(``read_ledger_metadata`` of the created ledgers) and delete. The work runs under a private
ledgers root (``/pybk-bench-<random>/ledgers``) removed at the end, so a live cluster is untouched.
The main result is the create phase; ``read`` and ``delete`` carry the same report shape.
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
from pybk.arg_types import positive

from .report import BenchResult, Progress

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
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = asyncio.run(run_metadata_bench(args.zk, args.ops, args.concurrency))
    result.print(args.json, "bench metadata (creates)")
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
    name: str, ops: int, concurrency: int, op: Callable[[int], Awaitable[None]]
) -> BenchResult:
    """Run ``op(i)`` for i in 0..ops-1 with ``concurrency`` workers; latency per op."""
    latencies: list[float] = []
    errors = 0
    next_index = 0
    progress = Progress(ops)

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
            latencies.append((time.perf_counter() - t0) * 1000.0)
            progress.update(len(latencies))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, ops))))
    elapsed = time.perf_counter() - start
    progress.done()
    return BenchResult(entries=len(latencies), errors=errors, elapsed_s=elapsed, entry_size=0,
                       latencies_ms=latencies)


async def run_metadata_bench(zk_hosts: str, ops: int, concurrency: int) -> BenchResult:
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
            versioned = await lm.read_ledger_metadata(ids[i])
            if versioned.value != md:
                raise AssertionError(f"ledger {ids[i]} read back different metadata")

        async def delete(i: int) -> None:
            await lm.remove_ledger_metadata(ids[i])

        creates = await _phase("create", ops, concurrency, create)
        reads = await _phase("read", ops, concurrency, read)
        deletes = await _phase("delete", ops, concurrency, delete)
        creates.extra = {
            "concurrency": concurrency,
            "read": reads.as_dict(),
            "delete": deletes.as_dict(),
        }
        return creates
    finally:
        try:
            await meta.zk.delete_recursive(root)
        finally:
            await meta.close()
