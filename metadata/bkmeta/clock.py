"""`Clock`: where the client and bkmeta read the time, so that a simulation controls it.

Two readings, for two purposes:

* ``monotonic()``: seconds for durations and deadlines (quarantines, add timeouts, waits);
* ``time_ms()``: wall-clock milliseconds since the epoch, for timestamps stored in metadata
  (a ledger's ``ctime``).

:class:`LoopClock`, the production clock, reads ``monotonic()`` from the running event loop.
That is the clock ``asyncio.sleep`` and every timeout already run on, so deadlines computed
from it agree with the loop's timers, and a simulation that runs a virtual-time loop makes
them virtual with nothing else to change. A simulation passes its own ``Clock`` where wall
time matters too (``time_ms``).

Code that computes a timeout only to hand it to the loop (``asyncio.wait(timeout=...)``, a
``call_later``), such as the tailing reader's fan-out delay or the bookie connection's batch
pacing, may keep reading ``loop.time()``: those numbers must be in the loop's own time whatever
the clock, and the loop is the simulation's virtual one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back."""
        ...

    def time_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class LoopClock:
    """The event loop's time (``loop`` or, when None, the loop running at each reading) and
    the system's wall clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    def monotonic(self) -> float:
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        return loop.time()

    def time_ms(self) -> int:
        return int(time.time() * 1000)
