"""What a cold ledger metadata read costs, for docs/performance.md and docs/cost-model.md.

    python scripts/metadata_read_cost.py --zk HOST:PORT [--ledgers N] [--rounds R] [--data-dir D]

Creates ``N`` ledgers under a private root, then ``R`` times opens a new client and reads every
ledger's metadata once, 64 reads at a time, through ``read_ledger_metadata_cached`` (what
``pybk bench metadata``'s ``read`` phase and ``open_ledger(recovery=False)`` do: a ZooKeeper
``getData`` with the cache's watch, then the decode). Per round: reads/s, the client's CPU per
read split between the event-loop thread and kazoo's connection thread (``/proc`` per thread),
and, with ``--data-dir`` (a ``pybk localcluster`` data directory), the ZooKeeper server's. On a
shared box the CPU per read moves much less than the rate does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import threading
import time
import uuid

from bkmeta import LedgerMetadata, MetadataClient, init_new_cluster
from pybk import event_loop
from pybk.bench.metadata import sample_metadata

CONCURRENCY = 64


def _cpu_s(pid: int, tid: int | None = None) -> float:
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _zookeeper_pid(data_dir: str | None) -> int | None:
    if data_dir is None:
        return None
    found = subprocess.run(["pgrep", "-f", f"java.*{data_dir}"], check=False, capture_output=True, text=True)
    pids = found.stdout.split()
    return int(pids[0]) if pids else None


def _kazoo_thread_id() -> int | None:
    # kazoo's connection thread runs ConnectionHandler.zk_loop; the newest is the new client's.
    ids = [t.native_id for t in threading.enumerate() if "zk_loop" in t.name and t.native_id]
    return ids[-1] if ids else None


async def _read_each_once(reader: MetadataClient, ids: list[int], md: LedgerMetadata) -> None:
    lm = reader.ledger_manager
    pending = iter(ids)

    async def worker() -> None:
        for ledger_id in pending:
            if (await lm.read_ledger_metadata_cached(ledger_id)).value != md:
                raise AssertionError(f"ledger {ledger_id} read back different metadata")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def main(zk: str, ledgers: int, rounds: int, data_dir: str | None) -> None:
    root = f"/pybk-read-cost-{uuid.uuid4().hex[:8]}"
    meta = await MetadataClient.connect(zk, f"{root}/ledgers", require_cluster=False, watch_bookies=False)
    try:
        await init_new_cluster(meta.zk, meta.layout)
        md = sample_metadata()
        ids: list[int] = []

        async def creator(count: int) -> None:
            for _ in range(count):
                ids.append((await meta.ledger_manager.create_ledger(md))[0])

        await asyncio.gather(*(creator(len(range(i, ledgers, CONCURRENCY))) for i in range(CONCURRENCY)))
        zk_pid = _zookeeper_pid(data_dir)
        rates: list[float] = []
        for _ in range(rounds):
            reader = await MetadataClient.connect(
                zk, f"{root}/ledgers", require_cluster=False, watch_bookies=False
            )
            pid, kazoo_tid = os.getpid(), _kazoo_thread_id()
            loop0, kazoo0 = _cpu_s(pid, pid), _cpu_s(pid, kazoo_tid) if kazoo_tid else 0.0
            process0, zk0 = time.process_time(), _cpu_s(zk_pid) if zk_pid else 0.0
            wall = time.perf_counter()
            await _read_each_once(reader, ids, md)
            wall = time.perf_counter() - wall
            per_read = 1e6 / len(ids)
            loop = (_cpu_s(pid, pid) - loop0) * per_read
            kazoo = (_cpu_s(pid, kazoo_tid) - kazoo0) * per_read if kazoo_tid else float("nan")
            process = (time.process_time() - process0) * per_read
            server = f", ZooKeeper {(_cpu_s(zk_pid) - zk0) * per_read:.1f}" if zk_pid else ""
            rates.append(len(ids) / wall)
            print(
                f"{len(ids) / wall:,.0f} reads/s; CPU µs per read: client {process:.1f} (event loop"
                f" {loop:.1f}, kazoo {kazoo:.1f}){server}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            await reader.close()
        low, mid, high = min(rates), statistics.median(rates), max(rates)
        print(f"reads/s min / median / max: {low:,.0f} / {mid:,.0f} / {high:,.0f}")
    finally:
        try:
            await meta.zk.delete_recursive(root)
        finally:
            await meta.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zk", required=True)
    parser.add_argument("--ledgers", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data-dir", help="the localcluster's data directory, to find its ZooKeeper")
    args = parser.parse_args()
    event_loop.run(main(args.zk, args.ledgers, args.rounds, args.data_dir))
