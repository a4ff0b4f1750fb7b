"""kazoo's answers into asyncio futures, at a small fixed cost per operation.

:class:`bkmeta.zk.ZkClient` awaits every ZooKeeper operation as a future of the event loop that
kazoo's connection thread completes. Three costs per operation mattered on the loop's side (the
side a cold metadata read is bound by; py-spy in ``pybk bench metadata``, figures in
docs/performance.md), and each has its cheaper form here:

* the hop into the loop: :class:`LoopBridge` hands completions over in bursts, one
  ``call_soon_threadsafe`` (a self-pipe write) for all the answers of one read of the socket;
* kazoo's result object (a ``threading.Condition`` and a lock per operation, then a callback
  linked to it): :class:`LoopResult` is what kazoo sets instead, two slots that pass the answer
  straight to the bridge;
* a timeout timer per operation (a heap push and a cancellation): the bridge keeps the deadlines
  in call order (every call has the same timeout, so that is deadline order too) and one timer
  for the earliest, which in steady traffic fires about once per timeout and finds it answered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


class LoopBridge:
    """Futures of one event loop, completed from any thread, each failed with ``TimeoutError``
    if not answered within ``timeout_s``. The queue of completions and the deadlines hold at most
    one item per call being awaited, so the callers' concurrency bounds them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._scheduled = False
        # Insertion order is deadline order: every future gets the same timeout.
        self._deadlines: dict[asyncio.Future[Any], float] = {}
        self._expiry: asyncio.TimerHandle | None = None

    # -- on the loop ------------------------------------------------------------------------------

    def future(self) -> asyncio.Future[Any]:
        """A future that fails with ``TimeoutError`` unless completed (or :meth:`release`d) in time."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        deadline = self._loop.time() + self._timeout_s
        self._deadlines[fut] = deadline
        if self._expiry is None:
            self._expiry = self._loop.call_at(deadline, self._expire)
        return fut

    def release(self, fut: asyncio.Future[Any]) -> None:
        """The caller is done with ``fut`` (answered, timed out or cancelled): forget its deadline,
        and the expiry timer with the last one (a lone caller's call then costs one timer, no
        more than a timer per call did)."""
        deadlines = self._deadlines
        deadlines.pop(fut, None)
        if not deadlines and self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _expire(self) -> None:
        self._expiry = None
        now = self._loop.time()
        expired: list[asyncio.Future[Any]] = []
        upcoming: float | None = None
        for fut, deadline in self._deadlines.items():
            if deadline > now:
                upcoming = deadline
                break
            expired.append(fut)
        for fut in expired:
            del self._deadlines[fut]
            if not fut.done():
                fut.set_exception(TimeoutError())
        if upcoming is not None:
            self._expiry = self._loop.call_at(upcoming, self._expire)

    def _drain(self) -> None:
        with self._lock:
            items, self._pending = self._pending, []
            self._scheduled = False
        for fut, value, exc in items:
            if fut.done():
                continue  # timed out meanwhile
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    # -- on any thread (kazoo's connection thread) ------------------------------------------------

    def complete(self, fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
        """Settle ``fut`` on the loop with ``value`` or ``exc``; never blocks. A second completion
        of the same future (kazoo may fail a request it already failed) is ignored."""
        with self._lock:
            self._pending.append((fut, value, exc))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            log.debug("event loop closed; dropping a ZooKeeper completion")


class LoopResult:
    """What kazoo's connection thread sets for a request sent with
    :meth:`bkmeta.zk_connection.BatchingKazooClient.submit`: kazoo calls ``set`` or
    ``set_exception`` (and tests it for truth), nothing else."""

    __slots__ = ("_bridge", "_fut")

    def __init__(self, bridge: LoopBridge, fut: asyncio.Future[Any]) -> None:
        self._bridge = bridge
        self._fut = fut

    def set(self, value: Any = None) -> None:
        self._bridge.complete(self._fut, value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._bridge.complete(self._fut, None, exception)
