"""The catch-up read's cost model: CPU microseconds per entry read in the client and in the bookies
together (docs/cost-model.md, "Reads"). Usage (``scripts/read_cost.sh`` starts a fresh cluster)::

    python scripts/read_cost.py --data-dir D --zk HOST:PORT [-w QW] [--reads N] [--json]

Writes one ledger (E3, Qw ``-w``, Qa 2, 1 KiB entries) and closes it, then reads it end to end
``--reads`` times with a fresh handle each, as ``pybk bench reads`` does (``ReadHandle.read``). For
each read: the entries per second, the client's CPU time per entry (``time.process_time``, this
process does nothing else meanwhile) and the bookies' CPU time per entry (``/proc``, every thread
of every bookie of the cluster). Each entry is read from one bookie, so the bookies' figure is what
an entry read costs the cluster's bookies in all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cost_model import CLK_TCK, find_bookies, host_speed_s, load_average, thread_ticks

from bkclient import BookKeeper, DigestType

PASSWORD = b"read-cost"


def bookies_cpu_s(pids: list[int]) -> float:
    return sum(sum(thread_ticks(pid)[0].values()) for pid in pids) / CLK_TCK


async def write_ledger(bk: BookKeeper, entries: int, qw: int) -> int:
    handle = await bk.create_ledger(3, qw, 2, DigestType.CRC32C, PASSWORD)
    payload = os.urandom(1024)
    for start in range(0, entries, 1000):
        await handle.append_batch_async([payload] * min(1000, entries - start))
    await handle.close()
    return handle.ledger_id


async def measure(args: argparse.Namespace) -> dict[str, object]:
    pids = [p.pid for p in find_bookies(args.data_dir)]
    if not pids:
        raise SystemExit(f"no bookie of a cluster under {args.data_dir}")
    rounds = []
    async with await BookKeeper.connect(args.zk) as bk:
        ledger_id = await write_ledger(bk, args.entries, args.write_quorum)
        for _ in range(args.reads):
            handle = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
            bookies_before, client_before = bookies_cpu_s(pids), time.process_time()
            began = time.perf_counter()
            count = 0
            async for _entry in handle.read(0, handle.last_add_confirmed):
                count += 1
            elapsed = time.perf_counter() - began
            client_us = (time.process_time() - client_before) / count * 1e6
            bookies_us = (bookies_cpu_s(pids) - bookies_before) / count * 1e6
            await handle.close()
            rounds.append({"entries_per_s": round(count / elapsed), "client_us": round(client_us, 2),
                           "bookies_us": round(bookies_us, 2)})
    return {
        "ledger_id": ledger_id, "write_quorum": args.write_quorum, "entries": args.entries,
        "rounds": rounds,
        "median": {key: statistics.median(r[key] for r in rounds) for key in rounds[0]},
        "load_average": load_average(), "host_speed_s": host_speed_s(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", required=True, help="the localcluster's data directory")
    parser.add_argument("--zk", required=True, help="its ZooKeeper connect string")
    parser.add_argument("-w", "--write-quorum", type=int, default=3,
                        help="3: every bookie holds every entry; 2: striped (default 3)")
    parser.add_argument("--entries", type=int, default=100_000, help="entries in the ledger (default 100000)")
    parser.add_argument("--reads", type=int, default=5, help="end-to-end reads (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    report = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(report))
    else:
        for r in report["rounds"]:  # type: ignore[attr-defined]
            print(f"{r['entries_per_s']:>9,} entries/s  client {r['client_us']:5.2f} µs/entry  "
                  f"bookies {r['bookies_us']:5.2f} µs/entry")
        print(f"median {report['median']}  load {report['load_average']}  "
              f"host speed {report['host_speed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
