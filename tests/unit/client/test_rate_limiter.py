"""The byte-rate limit of re-replication, on a fake clock: callers get the rate in arrival order,
concurrent callers share it, and idling earns no burst."""

from __future__ import annotations

import asyncio

import pytest

from bkclient.rate_limiter import ByteRateLimiter
from bkproto.errors import IncorrectParameterError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def test_each_caller_waits_for_the_bytes_before_it() -> None:
    clock = FakeClock()
    limiter = ByteRateLimiter(1000, clock=clock, sleep=clock.sleep)
    for _ in range(4):
        await limiter.acquire(500)
    assert clock.slept == [0.5, 0.5, 0.5]  # the first goes at once; 2,000 bytes take 1.5 s + its own
    assert clock.now == pytest.approx(101.5)


async def test_concurrent_callers_share_one_rate() -> None:
    clock = FakeClock()
    limiter = ByteRateLimiter(1000, clock=clock, sleep=clock.sleep)
    started: list[float] = []

    async def copier() -> None:
        for _ in range(3):
            await limiter.acquire(250)
            started.append(clock.now)

    await asyncio.gather(*(copier() for _ in range(4)))
    # 12 x 250 bytes at 1,000 bytes/s: the last one may start 2.75 s after the first, not before
    assert max(started) - min(started) == pytest.approx(2.75)


async def test_idle_time_earns_no_burst() -> None:
    clock = FakeClock()
    limiter = ByteRateLimiter(1000, clock=clock, sleep=clock.sleep)
    await limiter.acquire(1000)
    clock.now += 60  # a long pause
    await limiter.acquire(1000)
    await limiter.acquire(1000)
    assert clock.slept == [1.0]  # after the pause one goes at once, the next waits its turn


async def test_a_cancelled_wait_gives_its_bytes_back() -> None:
    clock = FakeClock()
    parked = asyncio.Event()

    async def sleep_until_cancelled(seconds: float) -> None:
        parked.set()
        await asyncio.Event().wait()

    limiter = ByteRateLimiter(1000, clock=clock, sleep=sleep_until_cancelled)
    await limiter.acquire(1000)  # the first goes at once; the next waits 1 s
    waiter = asyncio.create_task(limiter.acquire(5000))
    await parked.wait()
    waiter.cancel()  # say, its copy failed
    with pytest.raises(asyncio.CancelledError):
        await waiter
    limiter._sleep = clock.sleep  # type: ignore[method-assign]  # from now on, time passes
    await limiter.acquire(100)
    assert clock.slept == [1.0]  # after the first's 1,000 bytes only, not the cancelled 5,000 too


@pytest.mark.parametrize("rate", [0, -5, float("nan")])
def test_a_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(IncorrectParameterError, match="positive"):
        ByteRateLimiter(rate)
