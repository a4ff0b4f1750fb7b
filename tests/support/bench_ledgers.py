"""A stand-in for ``BookKeeper`` in the write benchmark's unit tests: ledgers whose appends cost
a fixed amount of CPU and complete on a later loop turn, as a real client's do."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any


class SlowAppendLedger:
    """Each append busy-waits ``append_cost_s`` (the client's own work per add) and completes
    on the next loop turn; ``turns_seen`` is the observer's turn count at each append."""

    def __init__(self, append_cost_s: float, turns: list[int]) -> None:
        self._cost = append_cost_s
        self._turns = turns
        self.turns_seen: list[int] = []
        self.ensemble_changes = 0
        self._next = 0

    def append_with_callback(self, payload: bytes, callback: Callable[[int, Any], None]) -> None:
        end = time.perf_counter() + self._cost
        while time.perf_counter() < end:
            pass
        self.turns_seen.append(self._turns[0])
        asyncio.get_running_loop().call_soon(callback, self._next, None)
        self._next += 1

    async def close(self) -> None:
        return None


class SlowAppendBookKeeper:
    """``create_ledger`` hands out one :class:`SlowAppendLedger`; ``observe`` counts loop turns
    (a task that yields once per turn), so a test can tell whether other tasks ran between
    the benchmark's appends."""

    def __init__(self, append_cost_s: float) -> None:
        self.turns = [0]
        self.ledger = SlowAppendLedger(append_cost_s, self.turns)

    async def create_ledger(self, *args: Any) -> SlowAppendLedger:
        return self.ledger

    async def observe(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns[0] += 1


def paced_write_args(rate: float) -> argparse.Namespace:
    """The arguments ``_write_phase`` reads, for one ledger at ``rate`` entries/s."""
    return argparse.Namespace(
        ensemble=3, write_quorum=2, ack_quorum=2, digest="crc32", ledgers=1, rate=rate, size=16, batch=False
    )
