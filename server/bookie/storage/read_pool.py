"""Where the storage's cold reads run, timed as BookKeeper times its read thread pool.

BookKeeper hands every read request to ``BookieReadThreadPool`` (an ``OrderedExecutor``) and
exports the length of each of its threads' queues, the time a task waited in the queue
(``task_queued``) and the time it ran (``task_execution``). Dashboards and tuning guides read
these to tell a bookie short of read threads (queue and ``task_queued`` grow) from a slow disk
(``task_execution`` grows).

pybookkeeper has no such pool: a read request runs on the event loop, which answers from the
write or read cache, and only a cache miss leaves the loop, as one blocking "read a run of entries
from the entry log" call on the loop's default thread pool (shared with flushes' and garbage
collection's blocking calls). That call is the closest thing to BookKeeper's read task, so it is
what these stats time: the queue is the cold reads submitted and not yet started, ``task_queued``
the wait from submission until a thread starts it, ``task_execution`` the blocking read itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from bookie.stats import OpLatency

T = TypeVar("T")


class ReadPool:
    """Runs blocking reads off the event loop, counting the waiting ones and timing each."""

    def __init__(self, queued: OpLatency, execution: OpLatency) -> None:
        self._queued = queued
        self._execution = execution
        self._lock = threading.Lock()  # submissions on the loop, starts on worker threads
        self._submitted = 0
        self._started = 0

    def waiting(self) -> int:
        """Reads submitted that no thread has started yet (BookKeeper's per-thread queue size)."""
        with self._lock:
            return self._submitted - self._started

    async def run(self, read: Callable[..., T], *args: object) -> T:
        submitted_at = time.perf_counter()
        state = _Submission()

        def timed() -> T:
            started_at = time.perf_counter()
            with self._lock:
                state.started = True
                if not state.dropped:
                    self._started += 1
            self._queued.observe((started_at - submitted_at) * 1000.0)
            ok = False
            try:
                result = read(*args)
                ok = True
                return result
            finally:
                self._execution.observe((time.perf_counter() - started_at) * 1000.0, success=ok)

        with self._lock:
            self._submitted += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(None, timed)
        except BaseException:
            with self._lock:
                if not state.started:  # cancelled before a thread took it: it no longer waits
                    state.dropped = True
                    self._submitted -= 1
            raise


class _Submission:
    """Whether a thread started one read, or its caller gave up first (both under the lock)."""

    __slots__ = ("dropped", "started")

    def __init__(self) -> None:
        self.started = False
        self.dropped = False
