"""What one lone add costs a bookie: round trip and the bookie's CPU per message.

A blocking-socket client (no event loop of its own, so its side of the round trip is as short as
Python allows) sends ``--adds`` adds of ``--size`` bytes to one bookie's add port, one message
at a time, each only after the previous answer came back, and prints one JSON line: the round
trip's percentiles (µs) and, with ``--pid``, the bookie's CPU (user + system, from
``/proc/PID/stat``) per message in windows of ``--window`` adds: the least and the median window.
On a shared host other processes' load inflates both (a busy core's caches, a descheduled loop
thread's wake-ups); the least window is the figure closest to the code's own cost. A message
per add is what a writer below a few thousand entries/s sends, so this is the per-message cost
that the 1,000/s and one-outstanding figures are made of (docs/cost-model.md, "A single outstanding add").

Usage: python scripts/lone_add_cost.py --add-port HOST:PORT [--pid BOOKIE_PID] [--adds 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import time

from bkproto.add_port import FRAME_HEADER, PREFACE, frame
from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2

MASTER_KEY = b"lone-add-cost-key-20"  # 20 bytes, as a client's
WARMUP_ADDS = 200


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = sock.recv(size - len(data))
        if not piece:
            raise ConnectionError("the bookie closed the connection")
        data += piece
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--add-port", required=True, help="the bookie's add port, HOST:PORT")
    parser.add_argument("--pid", type=int, help="the bookie's process id, for its CPU per message")
    parser.add_argument("--adds", type=int, default=6000)
    parser.add_argument("--window", type=int, default=1000, help="adds per CPU window")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    args = parser.parse_args()
    host, _, port = args.add_port.rpartition(":")
    ledger_id = random.randrange(1 << 40, 1 << 50)
    payload = os.urandom(args.size)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(PREFACE)
    round_trips: list[float] = []
    windows: list[float] = []  # the bookie's CPU per message, µs, in each window
    cpu_start = 0.0
    for entry_id in range(WARMUP_ADDS + args.adds + 1):
        timed = entry_id - WARMUP_ADDS
        if args.pid and timed >= 0 and timed % args.window == 0:
            cpu_now = cpu_seconds(args.pid)
            if timed:
                windows.append((cpu_now - cpu_start) / args.window * 1e6)
            cpu_start = cpu_now
        if timed == args.adds:
            break
        body = HEADER.pack(ledger_id, entry_id, entry_id - 1, len(payload)) + b"\0" * 4 + payload
        add = bookie_pb2.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=MASTER_KEY, body=body)
        message = frame(bookie_pb2.AddEntriesRequest(adds=[add]).SerializeToString())
        sent = time.perf_counter()
        sock.sendall(message)
        (length,) = FRAME_HEADER.unpack(receive_exactly(sock, FRAME_HEADER.size))
        answer = bookie_pb2.AddEntriesResponse.FromString(receive_exactly(sock, length))
        if entry_id >= WARMUP_ADDS:
            round_trips.append((time.perf_counter() - sent) * 1e6)
        if answer.results[0].status != bookie_pb2.EOK:
            raise SystemExit(f"add {entry_id} failed: {answer.results[0]}")
    sock.close()
    cuts = statistics.quantiles(round_trips, n=100)
    window_p50s = [
        statistics.median(round_trips[low : low + args.window])
        for low in range(0, len(round_trips), args.window)
    ]
    print(
        json.dumps(
            {
                "adds": args.adds,
                "round_trip_us": {
                    "p50": round(cuts[49], 1),
                    "p90": round(cuts[89], 1),
                    "p99": round(cuts[98], 1),
                    "p50_least_window": round(min(window_p50s), 1),
                },
                "bookie_cpu_us_per_message": {
                    "least_window": round(min(windows), 1),
                    "median_window": round(statistics.median(windows), 1),
                }
                if windows
                else None,
            }
        )
    )


if __name__ == "__main__":
    main()
