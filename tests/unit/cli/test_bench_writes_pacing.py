"""The write benchmark's pacing and throttle: bursts sized by the rate and by free throttle slots."""

from __future__ import annotations

import asyncio
from collections import deque
from time import monotonic
from typing import Any, cast

from tests.support.bench_ledgers import SlowAppendBookKeeper, paced_write_args

from pybk.bench.writes import _Pacer, _Tally, _write_phase


async def test_unlimited_rate_allows_everything_asked() -> None:
    pacer = _Pacer(monotonic(), 0)
    assert await pacer.allowance(0, 500) == 500


async def test_allowance_follows_the_rate() -> None:
    started = monotonic()
    pacer = _Pacer(started, 1000.0)  # one entry per ms
    assert await pacer.allowance(0, 100) == 1  # the first entry is due at once
    # Ten entries ahead of schedule: it sleeps until the next is due, then allows one.
    assert await pacer.allowance(10, 100) == 1
    assert monotonic() - started >= 0.009
    # Behind schedule: everything due so far leaves in one burst, capped by ``most``.
    await asyncio.sleep(0.05)
    due = int((monotonic() - started) * 1000) + 1 - 11
    burst = await pacer.allowance(11, 1000)
    assert due <= burst <= due + 5
    assert await pacer.allowance(11, 3) == 3


async def test_reserve_waits_for_room_under_the_throttle() -> None:
    tally = _Tally(throttle=3)
    sent_at: deque[float] = deque()
    done = tally.callback_for(sent_at, None)
    assert await tally.reserve(5) == 3  # only three slots exist
    sent_at.extend([monotonic()] * 3)
    waiter = asyncio.ensure_future(tally.reserve(5))
    await asyncio.sleep(0.01)
    assert not waiter.done()  # all slots taken
    done(0, None)  # one add completes: one slot frees
    assert await waiter == 1
    done(1, None)
    done(2, None)
    assert tally.outstanding == 1
    assert tally.latencies.total_count == 3
    assert tally.succeeded == 3


async def test_paced_adds_count_from_when_they_were_due() -> None:
    """Coordinated omission: an add sent late (the sender was held back) counts its wait."""
    tally = _Tally(throttle=10)
    started = monotonic()
    tally.begin(started, paced=True)
    sent_at: deque[float] = deque([monotonic()])
    due_at: deque[float] = deque([started - 0.5])  # it was due half a second before it left
    done = tally.callback_for(sent_at, due_at)
    await tally.reserve(1)
    done(0, None)
    tally.finish()
    assert tally.service_latencies is not None
    corrected = tally.latencies.histogram.get_max_value() / 1000.0
    service = tally.service_latencies.histogram.get_max_value() / 1000.0
    assert corrected >= 500.0
    assert service < corrected - 400.0


async def test_a_producer_behind_schedule_lets_other_tasks_run_between_bursts() -> None:
    """A producer that cannot keep up (each append costs more than the rate allows) sends every
    due entry in a burst; the add streams' senders and the answers must get the loop between
    bursts, or nothing leaves until the producer catches up, which it never does."""
    bk = SlowAppendBookKeeper(append_cost_s=20e-6)  # 20 µs per append: at most 50,000/s
    observer = asyncio.ensure_future(bk.observe())
    tally = _Tally(throttle=1_000_000)
    entries = 20_000
    await _write_phase(cast(Any, bk), paced_write_args(100_000.0), b"x", tally, entries, None, None)
    observer.cancel()
    seen = bk.ledger.turns_seen
    assert len(seen) == entries
    # The bursts grow while the producer falls further behind; the observer got the loop between
    # them, not only once the last entry had left.
    assert len(set(seen)) >= 2


async def test_a_fast_rate_is_sent_in_bursts_of_a_tick() -> None:
    """At 20,000 entries/s the producer wakes once per millisecond and sends the twenty entries
    due by then, rather than a loop turn per entry or two."""
    started = monotonic()
    pacer = _Pacer(started, 20_000.0)
    sent = await pacer.allowance(0, 1000)  # the first entries due at once: fewer than a tick's worth
    assert sent >= 20
    burst = await pacer.allowance(sent, 1000)
    assert burst >= 20
    assert monotonic() - started >= (sent + 19) / 20_000.0  # it waited for a tick's worth
    assert await pacer.allowance(sent + burst, 5) >= 1  # the end of a run: what is left, no more
    assert await pacer.allowance(sent + burst, 5) <= 5
