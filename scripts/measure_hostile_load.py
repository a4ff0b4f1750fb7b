"""Measure each hostile-load attack against a fresh real bookie: the bookie's RSS (before, peak,
after) and a well-behaved client's add latency over the add port while the attack runs.

Run from a worktree root with PYTHONPATH naming the code under test (the bookie process inherits it):

    PYTHONPATH=$PWD/proto:$PWD/metadata:$PWD/server:$PWD/client:$PWD/cli:$PWD \\
        python scripts/measure_hostile_load.py [--only NAME,...] [--seconds 10]

Prints one JSON line per attack. Attacks come from tests/support/hostile.py, in processes of their
own; the probe adds one entry at a time from 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
from tests.support.bookies import BookieProcess, entry_body, is_serving
from tests.support.hostile import AddPortClient, Attack, MiB, long_poll_from, peak_rss_bytes, rss_bytes

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

S = bookie_pb2


class Probe:
    """Adds one entry at a time over the add port until stopped; keeps each latency."""

    def __init__(self, port: int, ledger_id: int) -> None:
        self._client = AddPortClient(port)
        self._ledger_id = ledger_id
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        entry = 0
        while not self._stop.is_set():
            try:
                status, seconds = self._client.add(self._ledger_id, entry)
            except OSError:
                self.failures += 1
                return
            if status != S.EOK:
                self.failures += 1
            self.latencies.append(seconds)
            entry += 1
            time.sleep(0.01)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(120)
        self._client.close()
        lat = sorted(self.latencies) or [float("nan")]
        return {
            "adds": len(self.latencies),
            "failures": self.failures,
            "p50_ms": round(statistics.median(lat) * 1000, 1),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
            "max_ms": round(lat[-1] * 1000, 1),
        }


def heartbeat_seconds(http_port: int) -> float | str:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/heartbeat", timeout=30) as reply:
            reply.read()
    except OSError as exc:
        return f"failed: {exc}"
    return round(time.perf_counter() - started, 3)


Scenario = tuple[str, Callable[[BookieProcess], tuple[str, list[str]]]]

SCENARIOS: list[Scenario] = [
    # the noise floor: the probe alone (an HTTP attack of no connections)
    ("no-attack", lambda b: ("http-hold", [
        f"127.0.0.1:{b.http_port}", "--connections", "0", "--settle-s", "0"])),
    ("unfinished-frames", lambda b: ("unfinished-frames", [
        f"127.0.0.1:{b.add_port}", "--sources", "4", "--connections", "25", "--settle-s", "5"])),
    ("never-read", lambda b: ("never-read", [
        f"127.0.0.1:{b.add_port}", "--connections", "4", "--adds", "90000", "--settle-s", "8"])),
    ("keyless-1.5M-add-port", lambda b: ("big-messages", [
        f"127.0.0.1:{b.add_port}", "--adds", "1500000", "--frames", "3", "--settle-s", "0"])),
    ("keyless-1.5M-grpc", lambda b: ("big-messages", [
        f"127.0.0.1:{b.port}", "--grpc", "--adds", "1500000", "--frames", "3", "--settle-s", "0"])),
    ("valid-200k-add-port", lambda b: ("big-messages", [
        f"127.0.0.1:{b.add_port}", "--valid", "--adds", "200000", "--frames", "5", "--settle-s", "0"])),
    ("valid-90k-add-port", lambda b: ("big-messages", [
        f"127.0.0.1:{b.add_port}", "--valid", "--adds", "90000", "--frames", "5", "--settle-s", "0"])),
    ("long-polls-10k", lambda b: ("long-polls", [
        b.address, "--count", "10000", "--channels", "40", "--settle-s", "15"])),
    ("http-hold-200", lambda b: ("http-hold", [
        f"127.0.0.1:{b.http_port}", "--connections", "200", "--settle-s", "2"])),
    ("http-dribble-20", lambda b: ("http-hold", [
        f"127.0.0.1:{b.http_port}", "--connections", "20", "--dribble-s", "2", "--settle-s", "2"])),
]  # fmt: skip


def run(
    name: str, build: Callable[[BookieProcess], tuple[str, list[str]]], base: Path, seconds: float
) -> dict:
    bookie = BookieProcess(base / name).start()
    try:
        for entry in range(20):  # warm the add path up
            AddPortClient(bookie.add_port or 0).add(1, entry)
        rss_before = rss_bytes(bookie.pid)
        attack, args = build(bookie)
        probe = Probe(bookie.add_port or 0, 2)
        started = time.monotonic()
        with Attack(attack, *args[:1], *args[1:]) as running:
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
            extra: dict[str, object] = {"attack": running.ready}
            if attack == "long-polls":
                extra["legit_long_poll"] = long_poll_from("127.0.0.3", bookie.address, 1000)
            if attack == "http-hold":
                extra["heartbeat_s"] = heartbeat_seconds(bookie.http_port or 0)
            rss_during = rss_bytes(bookie.pid)
            latency = probe.stop()
            extra["closed_by_bookie"] = running.closed
        return {
            "attack": name,
            "rss_before_mib": rss_before // MiB,
            "rss_during_mib": rss_during // MiB,
            "rss_peak_mib": peak_rss_bytes(bookie.pid) // MiB,
            "probe": latency,
            "bookie_serving": is_serving(bookie.address),
            **extra,
        }
    finally:
        if bookie.running:
            bookie.kill9()


def malformed_and_edge_requests(base: Path) -> dict[str, object]:
    """2,000 unparseable gRPC requests (log growth) and a batched read from entry 2^63-1."""
    bookie = BookieProcess(base / "malformed").start()
    try:
        log_before = len(bookie.run_log_text())
        codes: dict[str, int] = {}
        last = 2**63 - 1
        with grpc.insecure_channel(bookie.address) as channel:
            call = channel.unary_unary("/bkproto.v1.Bookie/ReadEntry")
            for _ in range(2000):
                try:
                    call(b"\xff\xff\xff", timeout=30)
                except grpc.RpcError as exc:
                    codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
            stub = bookie_pb2_grpc.BookieStub(channel)
            add = S.AddRequest(ledger_id=9, entry_id=last, master_key=b"k" * 20, body=entry_body(9, last))
            stub.AddEntry(add, timeout=30)
            read = stub.ReadEntries(
                S.ReadEntriesRequest(ledger_id=9, first_entry_id=last, max_count=5), timeout=30
            )
        return {
            "attack": "malformed-grpc-2000",
            "codes": codes,
            "log_bytes": len(bookie.run_log_text()) - log_before,
            "read_entries_from_2^63-1": f"{S.StatusCode.Name(read.status)} {read.message}".strip(),
        }
    finally:
        bookie.kill9()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--seconds", type=float, default=15.0, help="attack duration per scenario")
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        for name, build in SCENARIOS:
            if wanted and name not in wanted:
                continue
            print(json.dumps(run(name, build, Path(tmp), args.seconds)), flush=True)
        if not wanted or "malformed-grpc-2000" in wanted:
            print(json.dumps(malformed_and_edge_requests(Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
