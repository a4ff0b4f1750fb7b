"""A byte-rate limit shared by concurrent copiers (BookKeeper's ``replicationRateByBytes``, which
re-replication applies with Guava's RateLimiter to each entry it copies, however many new bookies
the entry goes to).

Each caller reserves its bytes at once and then waits for the reservation's turn, so callers get
the rate in arrival order with no lock, and the limit holds across every lane and fragment that
shares the limiter. No credit accrues while idle: a copy resuming after a pause does not burst.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bkproto.errors import IncorrectParameterError


class ByteRateLimiter:
    def __init__(
        self,
        bytes_per_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not bytes_per_s > 0:
            raise IncorrectParameterError(f"a byte rate must be positive, got {bytes_per_s!r}")
        self.bytes_per_s = bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._free_at = clock()  # when the bytes reserved so far have all had their time

    async def acquire(self, size: int) -> None:
        """Wait until ``size`` more bytes fit the rate. The first caller after a pause goes at
        once; the time its bytes take is what the next caller waits (Guava's model)."""
        now = self._clock()
        start = max(now, self._free_at)
        end = self._free_at = start + size / self.bytes_per_s
        if start > now:
            try:
                await self._sleep(start - now)
            except asyncio.CancelledError:
                if self._free_at == end:  # the last reservation: give its time back
                    self._free_at = start
                raise
