"""``pybk bench writes``: replicated append throughput and latency (BookKeeper's
BenchThroughputLatency): ledgers with E/Qw/Qa, fixed-size entries, at most ``--throttle`` adds
outstanding, for a number of entries or a duration.

Like BenchThroughputLatency, a warm-up comes first (``--warmup`` entries, 0 to skip) on ledgers of
its own, at the same rate, and is not reported: the first adds of a client open its bookie streams
and would otherwise count a start-up cost once per run.

With ``--batch`` each burst of adds (what the throttle and the pacer let go at once) goes to each
ledger in one ``append_batch_async`` call with one future, and each of its entries counts the
batch's latency (the time its last entry completed). Without it, every add is an
``append_with_callback`` of its own.

With ``--rate`` each add's latency counts from the time it was due to be sent, so a stall that held
sends back shows in the figures (coordinated omission); ``service_latency_ms`` counts from the
actual send."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable
from time import monotonic
from typing import Any

from bkclient import BKError, BookKeeper, ClientConfig, DigestType
from bkclient.ops.add import AddCompletion
from pybk import event_loop
from pybk.arg_types import non_negative, non_negative_float, positive, positive_float
from pybk.progress import Progress

from .plot import add_plot_option, print_and_plot
from .report import BenchResult, LatencyRecorder

log = logging.getLogger(__name__)


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "writes", help="append entries to ledgers through the replicating client"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("-e", "--ensemble", type=positive, default=3, help="ensemble size E (default 3)")
    parser.add_argument("-w", "--write-quorum", type=positive, default=2, help="write quorum Qw (default 2)")
    parser.add_argument("-a", "--ack-quorum", type=positive, default=2, help="ack quorum Qa (default 2)")
    parser.add_argument("--size", type=positive, default=1024, help="entry size in bytes (default 1024)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--entries", type=positive, help="number of entries to write")
    amount.add_argument("--time", type=positive_float, help="seconds to write for")
    parser.add_argument(
        "--throttle", type=positive, default=10000,
        help="max outstanding adds over all ledgers (default 10000)"
    )
    parser.add_argument(
        "--rate", type=non_negative_float, default=0,
        help="target entries/s over all ledgers (default 0: unlimited); latency then counts from"
             " each add's scheduled send (coordinated omission), service_latency_ms from the actual one",
    )
    parser.add_argument("--ledgers", type=positive, default=1, help="ledgers written round-robin (default 1)")
    parser.add_argument(
        "--warmup",
        type=non_negative,
        default=10000,
        help="entries written first, on separate ledgers, and not reported (default 10000; 0: none)",
    )
    parser.add_argument(
        "--batch", action="store_true",
        help="append each burst with one append_batch_async per ledger; an entry's latency is its batch's",
    )
    parser.add_argument(
        "--digest", choices=[d.name.lower() for d in DigestType], default="crc32", help="digest type"
    )
    add_plot_option(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = event_loop.run(run_writes(args))
    print_and_plot(result, args, "bench writes")
    return 1 if result.errors else 0


class _Tally:
    """BookKeeper's throttle (at most ``throttle`` adds outstanding over all ledgers) and the
    completion bookkeeping. Adds report through ``append_with_callback``, not futures, like
    BookKeeper's benchmark uses asyncAddEntry: the figures measure the client, not asyncio."""

    def __init__(self, throttle: int) -> None:
        self.throttle = throttle
        self.outstanding = 0
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self.latencies = LatencyRecorder(monotonic())
        self.service_latencies: LatencyRecorder | None = None  # paced runs: from the actual send
        self.succeeded = 0
        self.errors = 0
        self.first_error: BaseException | None = None

    def begin(self, started: float, paced: bool) -> None:
        """The measured phase starts (its per-second series counts from ``started``)."""
        self.latencies = LatencyRecorder(started)
        self.service_latencies = LatencyRecorder(started) if paced else None

    def finish(self) -> None:
        now = monotonic()
        self.latencies.finish(now)
        if self.service_latencies is not None:
            self.service_latencies.finish(now)

    async def reserve(self, wanted: int) -> int:
        """Wait for room under the throttle, then take up to ``wanted`` (>= 1) slots; returns
        how many were taken (at least one)."""
        while self.outstanding >= self.throttle:
            self._room.clear()
            await self._room.wait()
        taken = min(wanted, self.throttle - self.outstanding)
        self.outstanding += taken
        self._idle.clear()
        return taken

    async def drained(self) -> None:
        while self.outstanding:
            await self._idle.wait()

    def callback_for(self, sent_at: deque[float], due_at: deque[float] | None) -> AddCompletion:
        """The completion callback of one ledger; its adds complete in entry-id order, so
        ``sent_at`` (appended at every send) and ``due_at`` (the scheduled send times of a paced
        run) pop in step."""
        latencies = self.latencies
        stage = latencies.stage_us
        service = self.service_latencies
        stage_service = service.stage_us if service is not None else None
        time = monotonic
        throttle = self.throttle

        def done(entry_id: int, error: BKError | None) -> None:
            started = sent_at.popleft()
            due = due_at.popleft() if due_at is not None else started
            outstanding = self.outstanding = self.outstanding - 1
            if outstanding == throttle - 1:  # room again (reserve never takes past the throttle)
                self._room.set()
            if not outstanding:
                self._idle.set()
            if error is None:
                now = time()
                if now >= latencies.next_fold_at:
                    latencies.advance(now)
                    if service is not None:
                        service.advance(now)
                stage(int((now - due) * 1e6 + 0.5))
                if stage_service is not None:
                    stage_service(int((now - started) * 1e6 + 0.5))
                self.succeeded += 1
            else:
                self.errors += 1
                if self.first_error is None:
                    self.first_error = error

        return done

    def batch_callback(self, count: int, sent: float, due: list[float] | None) -> Callable[[Any], None]:
        """The done-callback of one ``append_batch_async`` future of ``count`` entries sent at
        ``sent`` (scheduled at ``due``, each, in a paced run). A failed batch counts all its
        entries as errors (some may have been stored: the bench does not tell them apart)."""
        time = monotonic
        throttle = self.throttle

        def done(future: asyncio.Future[int]) -> None:
            outstanding = self.outstanding = self.outstanding - count
            if outstanding < throttle <= outstanding + count:  # room again
                self._room.set()
            if not outstanding:
                self._idle.set()
            error = future.exception()
            if error is None:
                now = time()
                if due is None:
                    self.latencies.record((now - sent) * 1000.0, now, count)
                else:
                    for due_at in due:
                        self.latencies.record((now - due_at) * 1000.0, now)
                if self.service_latencies is not None:
                    self.service_latencies.record((now - sent) * 1000.0, now, count)
                self.succeeded += count
            else:
                self.errors += count
                if self.first_error is None:
                    self.first_error = error

        return done

    @property
    def completed(self) -> int:
        return self.succeeded + self.errors


# How often a paced producer wakes at most: it sends what fell due since, in one burst.
PACER_TICK_S = 0.001


class _Pacer:
    """Holds the sender to ``rate`` entries/s (no limit when rate is 0), waking at most once per
    ``tick_s`` (1 ms, the event loop's timer resolution) to send every entry due by then in one
    burst, as a real producer fed by a network or a timer would. Each entry's latency counts
    from its own due time, so the up-to-a-tick wait of the burst's first entries is in the
    figures. Without the tick a producer at tens of thousands of entries/s never slept: each
    loop turn found the next entry due and sent a burst of two or three, a turn of the client's
    loop (and a flush of the write handles) per couple of entries, CPU the client under test
    lost on the same cores."""

    def __init__(
        self, started: float, rate: float, tick_s: float = PACER_TICK_S
    ) -> None:
        self._started = started
        self._rate = rate
        self._per_tick = max(1, int(rate * tick_s))

    async def allowance(self, sent: int, most: int) -> int:
        """How many entries may leave now (1 to ``most``) after ``sent`` already left; sleeps
        until a tick's worth (or ``most``) is due if fewer are."""
        if self._rate <= 0:
            return most
        least = min(self._per_tick, most)
        now = monotonic()
        due = int((now - self._started) * self._rate) + 1 - sent  # due times already passed
        if due >= least:
            return min(due, most)
        await asyncio.sleep(self._started + (sent + least - 1) / self._rate - now)
        due = int((monotonic() - self._started) * self._rate) + 1 - sent
        return max(1, min(due, most))


async def run_writes(args: argparse.Namespace) -> BenchResult:
    throttle = args.throttle
    config = ClientConfig(
        max_outstanding_adds=max(throttle, 1),
        max_outstanding_bytes=max(64 * 1024 * 1024, 2 * throttle * args.size),
    )
    payload = os.urandom(args.size)
    async with await BookKeeper.connect(args.zk, config) as bk:
        if args.warmup:
            warm = _Tally(throttle)
            await _write_phase(bk, args, payload, warm, args.warmup, None, None)
            if warm.first_error is not None:
                log.error("first warm-up add error: %s", warm.first_error)
        tally = _Tally(throttle)
        with Progress(args.entries, quiet=args.json) as progress:
            elapsed, changes = await _write_phase(bk, args, payload, tally, args.entries, args.time, progress)
    if tally.first_error is not None:
        log.error("first add error: %s", tally.first_error)
    return BenchResult(
        entries=tally.succeeded,
        errors=tally.errors,
        elapsed_s=elapsed,
        entry_size=args.size,
        latencies=tally.latencies,
        service_latencies=tally.service_latencies,
        extra={
            "ledgers": args.ledgers,
            "ensemble": args.ensemble,
            "write_quorum": args.write_quorum,
            "ack_quorum": args.ack_quorum,
            "throttle": throttle,
            "target_rate_eps": args.rate,
            "ensemble_changes": changes,
            "warmup_entries": args.warmup,
            "batch": args.batch,
        },
    )


async def _write_phase(
    bk: BookKeeper,
    args: argparse.Namespace,
    payload: bytes,
    tally: _Tally,
    entries: int | None,
    seconds: float | None,
    progress: Progress | None,
) -> tuple[float, int]:
    """Write ``entries`` entries (or for ``seconds``) to fresh ledgers at ``args.rate``, then
    close them; returns the elapsed time and the ensemble changes seen."""
    now = monotonic
    handles = [
        await bk.create_ledger(
            args.ensemble, args.write_quorum, args.ack_quorum, DigestType[args.digest.upper()], b"bench"
        )
        for _ in range(args.ledgers)
    ]
    started = monotonic()
    paced = args.rate > 0
    tally.begin(started, paced)
    sent_at = [deque[float]() for _ in handles]
    due_at = [deque[float]() for _ in handles] if paced else None
    callbacks = [tally.callback_for(times, due_at[i] if due_at is not None else None)
                 for i, times in enumerate(sent_at)]
    deadline = started + seconds if seconds else None
    sent = 0
    pace = _Pacer(started, args.rate)
    limit = entries if entries is not None else 1 << 62
    while sent < limit and (deadline is None or monotonic() < deadline):
        if tally.errors >= 100:
            break  # the cluster is failing: stop instead of reporting a flood of errors
        burst = await tally.reserve(await pace.allowance(sent, limit - sent))
        if args.batch:
            _append_burst(handles, payload, tally, sent, burst, now(), started if paced else None, args.rate)
            sent += burst
        else:
            for _ in range(burst):  # every reserved slot is used: drained() counts them down
                index = sent % len(handles)
                sent_at[index].append(now())
                if due_at is not None:
                    due_at[index].append(started + sent / args.rate)
                handles[index].append_with_callback(payload, callbacks[index])
                sent += 1
        if progress is not None and sent % 1024 < burst:
            progress.update(tally.completed)
        # One loop turn between bursts: the add streams send what the burst queued and the
        # answers that came meanwhile complete before the next burst. Without it, a producer
        # that fell behind (a burst is all the entries due) sent burst after burst in one task
        # step, holding every message back until it caught up: the next burst was larger, and so
        # the latency of every later add.
        await asyncio.sleep(0)
    await tally.drained()
    elapsed = monotonic() - started
    tally.finish()
    if progress is not None:
        progress.done()
    for handle in handles:
        await handle.close()
    return elapsed, sum(h.ensemble_changes for h in handles)


def _append_burst(
    handles: list[Any], payload: bytes, tally: _Tally, sent: int, burst: int, now: float,
    started: float | None, rate: float,
) -> None:
    """Entries ``sent`` to ``sent + burst - 1``, round-robin over ``handles`` as the one-by-one
    loop sends them, each ledger's share in one ``append_batch_async`` (``--batch``). ``started``:
    a paced run's start, from which each entry's scheduled send time counts."""
    for offset in range(min(burst, len(handles))):
        index = (sent + offset) % len(handles)
        numbers = range(sent + offset, sent + burst, len(handles))
        due = [started + number / rate for number in numbers] if started is not None else None
        future = handles[index].append_batch_async([payload] * len(numbers))
        future.add_done_callback(tally.batch_callback(len(numbers), now, due))
