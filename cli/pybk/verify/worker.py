"""The workload processes of ``pybk verify``: ``python -m pybk.verify.worker ROLE ...``.

* ``writer``: creates ledgers with a random E/Qw/Qa from ``--quorums``, appends pipelined
  payloads (at most ``--window`` in flight, about ``--rate`` a second), closes each ledger after
  a random number of entries and opens the next; a failed handle is abandoned (left open, for a
  recovery opener or the final check to close).
* ``recoverer``: every few seconds opens one of the newest still-open ledgers *with recovery*,
  racing its live writer (fences it), and reads the recovered ledger back.
* ``logger``: writes batches to a named log with the Spark sink's commit protocol
  (:mod:`pybk.verify.log_workload`).
* ``tailer``: follows the newest open ledgers from entry 0 as their writers go, through the
  client's LAC long poll.

Every outcome goes to ``--history`` (:mod:`pybk.verify.history`) the moment it is known. SIGTERM
asks for an orderly end (writers stop appending, wait for what is in flight, close); SIGKILL is
the nemesis and loses only unacknowledged knowledge. Everything random comes from ``--seed``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path

from bkclient import BookKeeper, ClientConfig
from bkclient.write_handle import WriteHandle
from bkproto.errors import BKError
from pybk import event_loop
from pybk.verify.history import (
    FAIL,
    INFO,
    INVOKE,
    OK,
    HistoryWriter,
    make_payload,
    payload_hash,
    read_fields,
)
from pybk.verify.log_workload import run_logger

log = logging.getLogger("pybk.verify.worker")

PASSWORD = b"pybk-verify"
APPLICATION = b"pybk-verify"
# Short timeouts so that a paused or partitioned bookie is noticed within a fault's lifetime.
CLIENT_CONFIG = ClientConfig(
    add_entry_timeout_s=2.0,
    read_entry_timeout_s=2.0,
    speculative_read_timeout_s=0.5,
    long_poll_timeout_s=2.0,
    metadata_timeout_s=4.0,
)
RECOVER_CANDIDATES = 12  # the newest ledgers a recoverer or tailer considers


def parse_quorums(text: str) -> list[tuple[int, int, int]]:
    """``3/2/2,3/3/2`` -> ``[(3, 2, 2), (3, 3, 2)]`` (E/Qw/Qa)."""
    out: list[tuple[int, int, int]] = []
    for part in text.split(","):
        e, w, a = (int(x) for x in part.strip().split("/"))
        if not e >= w >= a >= 1:
            raise ValueError(f"quorum {part!r}: need E >= Qw >= Qa >= 1")
        out.append((e, w, a))
    return out


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name: str = args.name
        self.rng = random.Random(args.seed)
        self.history = HistoryWriter(Path(args.history))
        self.stopping = asyncio.Event()

    async def stoppable_sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)

    async def connect(self) -> BookKeeper:
        while True:
            try:
                return await BookKeeper.connect(self.args.zk, CLIENT_CONFIG)
            except BKError as exc:
                self.history.emit(FAIL, "connect", error=type(exc).__name__)
                await asyncio.sleep(1.0)

    # -- writer --------------------------------------------------------------------------------

    async def run_writer(self, bk: BookKeeper) -> None:
        quorums = parse_quorums(self.args.quorums)
        while not self.stopping.is_set():
            e, w, a = self.rng.choice(quorums)
            self.history.emit(INVOKE, "create", E=e, Qw=w, Qa=a)
            try:
                handle = await bk.create_ledger(
                    ensemble=e, write_quorum=w, ack_quorum=a, password=PASSWORD,
                    custom_metadata={"application": APPLICATION, "writer": self.name.encode()},
                )
            except BKError as exc:
                self.history.emit(FAIL, "create", E=e, Qw=w, Qa=a, error=type(exc).__name__)
                await self.stoppable_sleep(0.5)
                continue
            self.history.emit(OK, "create", l=handle.ledger_id, E=e, Qw=w, Qa=a)
            await self.fill_ledger(handle, self.rng.randint(20, self.args.max_entries))

    async def fill_ledger(self, handle: WriteHandle, entries: int) -> None:
        ledger = handle.ledger_id
        window = asyncio.Semaphore(self.args.window)
        in_flight: set[asyncio.Future[int]] = set()
        broken = False
        interval = 1.0 / self.args.rate
        next_at = time.monotonic()

        def done(fut: asyncio.Future[int], seq: int, digest: str, started: float) -> None:
            nonlocal broken
            window.release()
            in_flight.discard(fut)
            if fut.cancelled():
                self.history.emit(INFO, "add", l=ledger, e=seq, h=digest, error="cancelled")
                return
            exc = fut.exception()
            if exc is None:
                latency_ms = round((time.monotonic() - started) * 1000, 2)
                self.history.emit(OK, "add", l=ledger, e=fut.result(), s=seq, h=digest, ms=latency_ms)
            else:
                broken = True  # BookKeeper: a failed add may still be stored, at its own id
                self.history.emit(INFO, "add", l=ledger, e=seq, h=digest, error=type(exc).__name__)

        for seq in range(entries):
            if self.stopping.is_set() or broken:
                break
            await window.acquire()
            if broken:
                window.release()
                break
            data = make_payload(self.name, ledger, seq, self.rng, self.rng.randint(16, self.args.size))
            digest = payload_hash(data)
            self.history.emit(INVOKE, "add", l=ledger, e=seq, h=digest)
            try:
                fut = handle.append_async(data)
            except BKError as exc:
                window.release()
                self.history.emit(FAIL, "add", l=ledger, e=seq, h=digest, error=type(exc).__name__)
                broken = True
                break
            in_flight.add(fut)
            started = time.monotonic()
            fut.add_done_callback(functools.partial(done, seq=seq, digest=digest, started=started))
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                next_at = time.monotonic()
        if in_flight:
            # Bounded: the client times adds out itself; this only guards against a hang.
            await asyncio.wait(set(in_flight), timeout=30.0)
        if broken:
            self.history.emit(INFO, "abandon", l=ledger)
            with contextlib.suppress(BKError):
                await handle.abort()
            return
        self.history.emit(INVOKE, "close", l=ledger)
        try:
            await asyncio.wait_for(handle.close(), timeout=30.0)
        except (BKError, TimeoutError) as exc:
            self.history.emit(INFO, "close", l=ledger, error=type(exc).__name__)
            with contextlib.suppress(BKError):
                await handle.abort()
            return
        self.history.emit(OK, "close", l=ledger, last=handle.last_add_confirmed)

    # -- recoverer -----------------------------------------------------------------------------

    async def open_ledgers(self, bk: BookKeeper) -> list[int]:
        """The newest ledgers of ours that are still open (metadata straight from ZooKeeper)."""
        found: list[int] = []
        for lid in (await bk.list_ledgers())[-RECOVER_CANDIDATES:]:
            with contextlib.suppress(BKError):
                md = await bk.ledger_metadata(lid)
                if md.custom_metadata.get("application") == APPLICATION and not md.is_closed:
                    found.append(lid)
        return found

    async def run_recoverer(self, bk: BookKeeper) -> None:
        while not self.stopping.is_set():
            await self.stoppable_sleep(self.rng.uniform(1.0, 2.0 * self.args.recover_every))
            if self.stopping.is_set():
                return
            try:
                candidates = await self.open_ledgers(bk)
            except BKError:
                continue
            if not candidates:
                continue
            ledger = self.rng.choice(candidates)
            self.history.emit(INVOKE, "recover", l=ledger)
            try:
                handle = await asyncio.wait_for(bk.open_ledger(ledger, PASSWORD, recovery=True), 60.0)
            except (BKError, TimeoutError) as exc:
                self.history.emit(INFO, "recover", l=ledger, error=type(exc).__name__)
                continue
            last = handle.last_add_confirmed
            self.history.emit(OK, "recover", l=ledger, last=last)
            try:
                async for entry in handle.read(0, last):
                    fields = read_fields(entry.data, ledger, entry.entry_id)
                    self.history.emit(OK, "read", **fields, src="recover")
            except BKError as exc:
                self.history.emit(INFO, "read", l=ledger, error=type(exc).__name__, src="recover")
            finally:
                await handle.close()

    # -- tailer --------------------------------------------------------------------------------

    async def run_tailer(self, bk: BookKeeper) -> None:
        tailed: set[int] = set()
        tasks: set[asyncio.Task[None]] = set()
        while not self.stopping.is_set():
            if len(tasks) < 2:
                with contextlib.suppress(BKError):
                    fresh = [lid for lid in await self.open_ledgers(bk) if lid not in tailed]
                    if fresh:
                        ledger = max(fresh)
                        tailed.add(ledger)
                        task = asyncio.create_task(self.tail_one(bk, ledger))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            await self.stoppable_sleep(1.0)
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def tail_one(self, bk: BookKeeper, ledger: int) -> None:
        self.history.emit(INVOKE, "tail", l=ledger)
        expected = 0
        try:
            handle = await bk.open_ledger(ledger, PASSWORD, recovery=False)
            try:
                entries = handle.tail(0)
                while True:
                    # A ledger nobody writes to any more (its writer killed) never closes by
                    # itself: give up after a quiet spell rather than hold a slot for ever.
                    entry = await asyncio.wait_for(anext(entries), timeout=30.0)
                    fields = read_fields(entry.data, ledger, entry.entry_id)
                    self.history.emit(OK, "read", **fields, src="tail")
                    expected = entry.entry_id + 1
            finally:
                await handle.close()
        except StopAsyncIteration:
            self.history.emit(OK, "tail", l=ledger, last=expected - 1)
        except (BKError, TimeoutError) as exc:
            self.history.emit(INFO, "tail", l=ledger, last=expected - 1, error=type(exc).__name__)


async def amain(args: argparse.Namespace) -> int:
    worker = Worker(args)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stopping.set)
    worker.history.emit(OK, "start", role=args.role, pid=os.getpid())
    bk = await worker.connect()
    try:
        if args.role == "logger":
            await run_logger(worker, bk)
        else:
            roles = {"writer": worker.run_writer, "recoverer": worker.run_recoverer,
                     "tailer": worker.run_tailer}
            await roles[args.role](bk)
    finally:
        await bk.close()
        worker.history.emit(OK, "stop", role=args.role)
        worker.history.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pybk.verify.worker")
    parser.add_argument("role", choices=("writer", "recoverer", "tailer", "logger"))
    parser.add_argument("--zk", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--quorums", default="3/2/2")
    parser.add_argument("--rate", type=float, default=100.0, help="appends a second, at most")
    parser.add_argument("--window", type=int, default=32, help="appends in flight, at most")
    parser.add_argument("--size", type=int, default=512, help="largest payload filler (bytes)")
    parser.add_argument("--max-entries", type=int, default=600, help="most entries in one ledger")
    parser.add_argument("--recover-every", type=float, default=4.0, help="mean seconds between recoveries")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    args = build_parser().parse_args(argv)
    return event_loop.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
