"""The deterministic event loop: asyncio's own loop with a virtual clock.

Time only moves when nothing is ready to run: the selector's ``select(timeout)`` adds ``timeout`` to
the clock (whole microseconds, so the clock is an integer and never drifts) and polls with 0. Ready
callbacks run FIFO, so given the same inputs every run schedules identically. Waiting with no timer
at all is a deadlock and raises. Threads are forbidden: ``run_in_executor`` raises.

Timers due at the same time fire in the order they were set. Tasks and futures hash by their
creation number instead of their address: client code iterates
``asyncio.wait``'s ``done`` sets, whose order otherwise follows memory addresses and changes from
run to run.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import selectors
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, TypeVar

T = TypeVar("T")

MICROS = 1_000_000


class SimDeadlockError(RuntimeError):
    """The loop has nothing ready and no timer: something waits for an event that cannot come."""


class SimTimeLimitError(RuntimeError):
    """Virtual time passed the run's bound."""


class VirtualClockSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The real selector (it still serves the loop's self-pipe) whose waits advance the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now_us = 0
        self.limit_us: int | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise SimDeadlockError("event loop would wait forever: no task ready and no timer set")
        if timeout > 0:
            self.now_us += max(1, math.ceil(timeout * MICROS))
            if self.limit_us is not None and self.now_us > self.limit_us:
                raise SimTimeLimitError(f"virtual time passed {self.limit_us / MICROS:.0f} s")
        return super().select(0)


class SimTask(asyncio.Task[T]):
    """A task hashing by its creation number (see the module docstring)."""

    def __init__(self, coro: Coroutine[Any, Any, T], *, loop: SimLoop, **kwargs: Any) -> None:
        self.sim_id = loop.next_id()  # before Task.__init__, which puts the task in a WeakSet
        super().__init__(coro, loop=loop, **kwargs)

    def __hash__(self) -> int:
        return self.sim_id


class SimFuture(asyncio.Future[T]):
    def __init__(self, *, loop: SimLoop) -> None:
        self.sim_id = loop.next_id()
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self.sim_id


class SimTimerHandle(asyncio.TimerHandle):
    """A timer ordered by (time, creation number): asyncio orders timers by time alone, and
    timers due at the same time then fire in an order that depends on the heap's history."""

    __slots__ = ("sim_id",)

    def __init__(
        self, when: float, callback: Callable[..., object], args: Any, loop: SimLoop, context: Context | None
    ) -> None:
        super().__init__(when, callback, args, loop, context)
        self.sim_id = loop.next_id()

    def __lt__(self, other: object) -> bool:
        if isinstance(other, SimTimerHandle):
            return (self._when, self.sim_id) < (other._when, other.sim_id)  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return self.sim_id


class SimLoop(asyncio.SelectorEventLoop):
    """Run with ``asyncio.Runner(loop_factory=SimLoop)``."""

    def __init__(self) -> None:
        self._sim_selector = VirtualClockSelector()
        self._ids = 0
        super().__init__(self._sim_selector)
        self._clock_resolution = 1 / MICROS
        self.set_task_factory(self._make_task)

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def time(self) -> float:
        return self._sim_selector.now_us / MICROS

    @property
    def now_us(self) -> int:
        return self._sim_selector.now_us

    def block(self, seconds: float) -> None:
        """The loop's thread is busy for ``seconds`` (a system call made on it): the clock moves
        on, and whatever fell due meanwhile runs late. The one loop is every simulated process's,
        so all of them stall, not only the caller. (The time limit is checked at the next wait:
        raised here, the caller's error handling would take it for its own failure.)"""
        self._sim_selector.now_us += max(1, math.ceil(seconds * MICROS))

    def set_time_limit(self, seconds: float) -> None:
        self._sim_selector.limit_us = int(seconds * MICROS)

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.TimerHandle:
        self._check_closed()  # type: ignore[attr-defined]
        timer = SimTimerHandle(when, callback, args, self, context)
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def create_future(self) -> asyncio.Future[Any]:
        return SimFuture(loop=self)

    @staticmethod
    def _make_task(
        loop: asyncio.AbstractEventLoop, coro: Generator[Any, None, T] | Coroutine[Any, Any, T], **kwargs: Any
    ) -> asyncio.Future[T]:
        assert isinstance(loop, SimLoop)
        return SimTask(coro, loop=loop, **kwargs)  # type: ignore[arg-type]

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:  # type: ignore[override]
        raise RuntimeError(f"threads are not allowed in the simulation (run_in_executor of {func!r})")

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("name resolution is not allowed in the simulation")

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        raise RuntimeError("threads are not allowed in the simulation (call_soon_threadsafe)")
