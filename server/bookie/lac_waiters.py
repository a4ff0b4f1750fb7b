"""Long-poll LAC waiters: reads parked per ledger until its LAC passes their ``previous_lac``.

Woken by the add or WriteLac that moves the LAC (no polling); the number of parked waiters is
bounded, and a read beyond the bound is refused with ETOOMANYREQUESTS instead of piling up.
Event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError


class LacWaiters:
    def __init__(self, max_waiters: int) -> None:
        self.max_waiters = max_waiters
        self._waiters: dict[int, list[tuple[int, asyncio.Future[int]]]] = {}
        self.parked = 0

    async def wait(
        self, ledger_id: int, previous_lac: int, timeout_s: float, current_lac: Callable[[], int]
    ) -> int:
        lac = current_lac()
        if lac > previous_lac or timeout_s <= 0:
            return lac
        if self.parked >= self.max_waiters:
            raise BookieError(bookie_pb2.ETOOMANYREQUESTS, f"{self.parked} long-poll reads already parked")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        entry = (previous_lac, future)
        self._waiters.setdefault(ledger_id, []).append(entry)
        self.parked += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, timeout_s)
        finally:
            self.parked -= 1
            waiters = self._waiters.get(ledger_id)
            if waiters is not None:
                with contextlib.suppress(ValueError):
                    waiters.remove(entry)
                if not waiters:
                    del self._waiters[ledger_id]
        return current_lac()

    def notify(self, ledger_id: int, lac: int) -> None:
        waiters = self._waiters.get(ledger_id)
        if not waiters:
            return
        for previous_lac, future in waiters:
            if lac > previous_lac and not future.done():
                future.set_result(lac)

    def cancel_all(self) -> None:
        for waiters in self._waiters.values():
            for _, future in waiters:
                if not future.done():
                    future.set_result(-1)
