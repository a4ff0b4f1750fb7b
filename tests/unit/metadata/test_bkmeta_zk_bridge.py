"""``LoopBridge`` settles loop futures from kazoo's thread and fails the unanswered ones."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bkmeta.zk_bridge import LoopBridge, LoopResult


async def test_answers_from_another_thread_reach_their_futures() -> None:
    bridge = LoopBridge(asyncio.get_running_loop(), timeout_s=30.0)
    ok, failed = bridge.future(), bridge.future()

    def kazoo_thread() -> None:
        LoopResult(bridge, ok).set(("data", 1))
        LoopResult(bridge, failed).set_exception(KeyError("no node"))

    worker = threading.Thread(target=kazoo_thread)
    worker.start()
    worker.join()
    assert await ok == ("data", 1)
    with pytest.raises(KeyError):
        await failed


async def test_an_unanswered_call_times_out_and_a_late_answer_is_ignored() -> None:
    bridge = LoopBridge(asyncio.get_running_loop(), timeout_s=0.05)
    fut = bridge.future()
    with pytest.raises(TimeoutError):
        await fut
    bridge.complete(fut, "late", None)  # kazoo answering after the caller gave up
    await asyncio.sleep(0)  # the drain runs and must not touch the settled future
    assert isinstance(fut.exception(), TimeoutError)


async def test_a_call_made_after_answered_ones_still_times_out() -> None:
    """The one expiry timer is set for the first call's deadline; that call answered and released,
    the timer must still fail the later one, at its own deadline."""
    bridge = LoopBridge(asyncio.get_running_loop(), timeout_s=0.1)
    first = bridge.future()
    await asyncio.sleep(0.02)
    later = bridge.future()
    bridge.complete(first, 1, None)
    assert await first == 1
    bridge.release(first)
    await asyncio.wait([later], timeout=10)  # failed by the bridge long before, or never
    assert later.done() and isinstance(later.exception(), TimeoutError)
    bridge.release(later)
    answered = [bridge.future() for _ in range(3)]
    for i, fut in enumerate(answered):
        bridge.complete(fut, i, None)
    assert await asyncio.gather(*answered) == [0, 1, 2]
    for fut in answered:
        bridge.release(fut)
    assert not bridge._deadlines and bridge._expiry is None  # nothing kept for calls that are over
