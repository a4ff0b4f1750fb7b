"""Where a lone add's time goes between the client library and its bookies.

One writer appends ``--adds`` entries one at a time (each after the previous completed, as
``pybk bench writes --throttle 1`` does) and stamps each add's hops with ``time.perf_counter``:
the append call, each add-port message written (one per bookie of the write set), each answer
frame received, and the completion callback. Hooks wrap two methods of the client's add-port
call and frame reader for the run (measurement only; nothing else changes). It prints one JSON
line: the median µs from the append to each hop over the adds after ``--skip``.

The ack quorum is the write quorum: a smaller one completes the add at its first answer, and the
late answer then lands in the next add's trace.

Usage: python scripts/lone_add_trace.py --zk HOST:PORT [--ensemble 3] [--quorum 2] [--adds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from bkclient import BKError, BookKeeper, DigestType, add_port_call, frame_reader
from pybk import event_loop

Marks = list[tuple[str, float]]


def install_hooks(marks: Marks) -> None:
    """Stamp every add-port message written and every answer frame received into ``marks``."""
    call = add_port_call.AddPortCall
    reader = frame_reader.FrameReader
    write_nowait, write_framed, deliver = call.write_framed_nowait, call.write_framed, reader._deliver

    def stamped_write_nowait(self: Any, framed: bytes) -> None:
        marks.append(("sent", time.perf_counter()))
        write_nowait(self, framed)

    async def stamped_write_framed(self: Any, framed: bytes) -> None:
        marks.append(("sent", time.perf_counter()))
        await write_framed(self, framed)

    def stamped_deliver(self: Any, frame: Any) -> None:
        marks.append(("answer", time.perf_counter()))
        deliver(self, frame)

    call.write_framed_nowait = stamped_write_nowait  # type: ignore[method-assign]
    call.write_framed = stamped_write_framed  # type: ignore[method-assign]
    reader._deliver = stamped_deliver  # type: ignore[method-assign]


async def trace(args: argparse.Namespace) -> dict[str, Any]:
    marks: Marks = []
    install_hooks(marks)
    traces: list[tuple[float, Marks]] = []
    async with await BookKeeper.connect(args.zk) as bk:
        handle = await bk.create_ledger(args.ensemble, args.quorum, args.quorum, DigestType.CRC32C, b"trace")
        payload = b"p" * args.size
        loop = asyncio.get_running_loop()
        for i in range(args.adds):
            done = loop.create_future()

            def completed(entry_id: int, error: BKError | None, done: asyncio.Future[None] = done) -> None:
                marks.append(("done", time.perf_counter()))
                done.set_result(None)

            marks.clear()
            started = time.perf_counter()
            handle.append_with_callback(payload, completed)
            await done
            if i >= args.skip:
                traces.append((started, list(marks)))
        await handle.close()

    def median_us(kind: str, pick: int) -> float:
        times = [[t - started for k, t in hops if k == kind] for started, hops in traces]
        return round(statistics.median(ts[pick] for ts in times if ts) * 1e6, 1)

    return {
        "adds": len(traces),
        "ensemble": args.ensemble,
        "quorum": args.quorum,
        "event_loop": event_loop.chosen(),
        "median_us_from_append": {
            "first message written": median_us("sent", 0),
            "last message written": median_us("sent", -1),
            "first answer received": median_us("answer", 0),
            "last answer received": median_us("answer", -1),
            "completion callback": median_us("done", 0),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zk", required=True)
    parser.add_argument("--ensemble", type=int, default=3)
    parser.add_argument("--quorum", type=int, default=2, help="write and ack quorum")
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--skip", type=int, default=200, help="first adds left out (warm-up)")
    parser.add_argument("--size", type=int, default=1024)
    print(json.dumps(event_loop.run(trace(parser.parse_args()))))


if __name__ == "__main__":
    main()
