"""What a read costs, for docs/performance.md ("Catch-up reads and the tailing reader").

    python scripts/read_cost.py range --zk HOST:PORT --ledger ID --data-dir D [--times N]
    python scripts/read_cost.py tail --zk HOST:PORT [--rate R] [--time S]

``range`` reads a closed ledger (written by ``pybk bench reads``) end to end with
``ReadHandle.read`` and prints entries/s, the client's CPU per entry and the CPU per entry of the
bookies whose command line names ``D`` (a ``pybk localcluster`` data directory), from
``/proc/PID/stat``: on a shared box CPU per entry moves much less than throughput.

It applies the malloc settings every ``pybk`` command makes (``pybk.allocator``): without them each
answer's socket reads were fresh mappings, and the client's CPU per entry was not what a ``pybk``
process pays (docs/performance.md, "Catch-up reads over the read stream").

``tail`` writes ``R`` entries/s for ``S`` seconds and tails the ledger in the same process, and
splits each entry's ack -> receipt latency at the append of the first entry after the ack, the
first that can carry a LAC covering it: "ack -> next send" is the wait for that append,
"next send -> recv" the time until the LAC reaches a bookie and the reader has the entry.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import os
import subprocess
import time

from bkclient import BookKeeper, DigestType
from pybk import event_loop
from pybk.allocator import keep_large_buffers


def _bookies_cpu_s(data_dir: str) -> float:
    pattern = f"pybk bookie.*{data_dir}"
    found = subprocess.run(["pgrep", "-f", pattern], check=False, capture_output=True, text=True)
    ticks = 0
    for pid in found.stdout.split():
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def read_range(zk: str, ledger_id: int, data_dir: str, times: int) -> None:
    async with await BookKeeper.connect(zk) as bk:
        for _ in range(times):
            handle = await bk.open_ledger(ledger_id, b"bench", recovery=False)
            bookies, client, wall = _bookies_cpu_s(data_dir), time.process_time(), time.perf_counter()
            count = 0
            async for _entry in handle.read(0, handle.last_add_confirmed):
                count += 1
            wall = time.perf_counter() - wall
            client = time.process_time() - client
            bookies = _bookies_cpu_s(data_dir) - bookies
            print(
                f"ledger {ledger_id}: {count / wall:,.0f} entries/s,"
                f" client {1e6 * client / count:.1f} µs/entry, bookies {1e6 * bookies / count:.1f} µs/entry,"
                f" load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


def _stamp(times: list[float], index: int, _done: object) -> None:
    times[index] = time.monotonic()


async def tail(zk: str, rate: float, seconds: float) -> None:
    count = int(rate * seconds)
    payload = os.urandom(1024)
    sent, acked, received = [0.0] * count, [0.0] * count, [0.0] * count
    async with await BookKeeper.connect(zk) as writer_bk, await BookKeeper.connect(zk) as reader_bk:
        writer = await writer_bk.create_ledger(3, 2, 2, DigestType.CRC32C, b"bench")
        reader = await reader_bk.open_ledger(writer.ledger_id, b"bench", recovery=False)

        async def follow() -> None:
            async for entry in reader.tail(0):
                received[entry.entry_id] = time.monotonic()
                if entry.entry_id == count - 1:
                    return

        following = asyncio.ensure_future(follow())
        await asyncio.sleep(0.5)
        start = time.monotonic()
        adds = []
        for i in range(count):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[i] = time.monotonic()
            add = writer.append_async(payload)
            add.add_done_callback(functools.partial(_stamp, acked, i))
            adds.append(add)
        await asyncio.gather(*adds)
        await writer.close()  # the last entries' LAC comes with the close
        await asyncio.wait_for(following, 60)
    splits: dict[str, list[float]] = {"ack -> recv": [], "ack -> next send": [], "next send -> recv": []}
    for e in range(count - 50):  # the last ones wait for the close
        carrier = bisect.bisect_left(sent, acked[e])
        if carrier < count:
            splits["ack -> recv"].append(received[e] - acked[e])
            splits["ack -> next send"].append(sent[carrier] - acked[e])
            splits["next send -> recv"].append(received[e] - sent[carrier])
    splits["add latency"] = [a - s for s, a in zip(sent, acked, strict=True)]
    for name, values in splits.items():
        values.sort()
        p50, p90, p99 = (1000 * values[int(q * (len(values) - 1))] for q in (0.5, 0.9, 0.99))
        print(f"{name:18s} p50 {p50:6.2f}  p90 {p90:6.2f}  p99 {p99:6.2f} ms")
    print(f"load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    kinds = parser.add_subparsers(dest="kind", required=True)
    ranged = kinds.add_parser("range")
    ranged.add_argument("--zk", required=True)
    ranged.add_argument("--ledger", type=int, required=True)
    ranged.add_argument("--data-dir", required=True)
    ranged.add_argument("--times", type=int, default=1)
    tailing = kinds.add_parser("tail")
    tailing.add_argument("--zk", required=True)
    tailing.add_argument("--rate", type=float, default=1000.0)
    tailing.add_argument("--time", type=float, default=5.0)
    args = parser.parse_args()
    keep_large_buffers()
    if args.kind == "range":
        event_loop.run(read_range(args.zk, args.ledger, args.data_dir, args.times))
    else:
        event_loop.run(tail(args.zk, args.rate, args.time))


if __name__ == "__main__":
    main()
