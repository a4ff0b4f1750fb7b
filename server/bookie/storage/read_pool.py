"""Where the storage's cold reads run, timed as BookKeeper times its read thread pool.

BookKeeper hands every read request to ``BookieReadThreadPool`` (an ``OrderedExecutor``) and
exports the length of each of its threads' queues, the time a task waited in the queue
(``task_queued``) and the time it ran (``task_execution``). Dashboards and tuning guides read
these to tell a bookie short of read threads (queue and ``task_queued`` grow) from a slow disk
(``task_execution`` grows).

Here a read request runs on the event loop, which answers from the write or read cache, and only a
cache miss leaves the loop, as one blocking "read a run of entries from the entry log" call on this
pool's threads (``numReadWorkerThreads``). That call is the closest thing to BookKeeper's read
task, so it is what these stats time: the queue is the cold reads submitted and not yet started,
``task_queued`` the wait from submission until a thread starts it, ``task_execution`` the blocking
read itself. At most ``maxPendingReadRequestsPerThread`` x threads reads wait; one more is refused
with ETOOMANYREQUESTS, as BookKeeper rejects a read when its thread's queue is full.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError
from bookie.stats import OpLatency

from .config import StorageConfig
from .stats import StorageStats

T = TypeVar("T")


class ReadPool:
    """Runs blocking reads off the event loop, counting the waiting ones and timing each."""

    def __init__(
        self, queued: OpLatency, execution: OpLatency, threads: int = 8, max_pending_per_thread: int = 0
    ) -> None:
        """``max_pending_per_thread``: 0 for no limit."""
        if threads < 1:
            raise ValueError(f"numReadWorkerThreads must be >= 1, got {threads}")
        self._queued = queued
        self._execution = execution
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="bookie-read")
        self._max_waiting = threads * max_pending_per_thread if max_pending_per_thread > 0 else None
        self._lock = threading.Lock()  # submissions on the loop, starts on worker threads
        self._submitted = 0
        self._started = 0

    @classmethod
    def from_config(cls, config: StorageConfig, stats: StorageStats) -> ReadPool:
        """The storage's read pool, its queue length exported through ``stats``."""
        pool = cls(stats.read_pool_task_queued, stats.read_pool_task_execution,
                   config.read_worker_threads, config.max_pending_reads_per_thread)
        stats.read_pool_queue.waiting = pool.waiting
        return pool

    def close(self) -> None:
        """Let the reads in progress finish; no new ones."""
        self._executor.shutdown(wait=False, cancel_futures=True)

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
            waiting = self._submitted - self._started
            if self._max_waiting is not None and waiting >= self._max_waiting:
                raise BookieError(
                    bookie_pb2.ETOOMANYREQUESTS,
                    f"{waiting} entry-log reads already wait for a read thread"
                    " (maxPendingReadRequestsPerThread)",
                )
            self._submitted += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, timed)
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
