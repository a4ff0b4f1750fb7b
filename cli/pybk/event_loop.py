"""The event loop pybk's processes run on (bookies, autorecovery, localcluster, benchmarks, tools).

Why: a bookie's add port and read stream, and the client's side of them, are asyncio protocols on
plain TCP. On asyncio's own loop every socket read, write and readiness check goes through Python
(the selector, the transport's methods); uvloop does that part in libuv's C. The rest (gRPC's
``grpc.aio``, kazoo's thread, the handlers) runs unchanged on either (docs/performance.md has the
alternated runs that chose it).

``PYBK_EVENT_LOOP`` chooses: ``uvloop`` (the default, when uvloop is installed: it comes with the
``server`` extra), or ``asyncio`` for the standard library's loop. An application that embeds
``bkclient`` chooses its own loop: the client works on both.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pybk.stdio import open_standard_fds

ENV = "PYBK_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")

T = TypeVar("T")


class EventLoopChoiceError(ValueError):
    """``PYBK_EVENT_LOOP`` names no loop this process can run."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``PYBK_EVENT_LOOP`` asks for; None for asyncio's own. Unset, it
    is uvloop's where uvloop imports, asyncio's elsewhere."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "asyncio":
        return None
    if choice not in ("", "uvloop"):
        raise EventLoopChoiceError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(CHOICES)}")
    try:
        import uvloop
    except ImportError as exc:
        if choice:
            raise EventLoopChoiceError(f"{ENV}=uvloop, but uvloop does not import ({exc})") from exc
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` gives."""
    try:
        factory = loop_factory()
    except EventLoopChoiceError:
        main.close()  # never awaited: no "coroutine was never awaited" warning on top of the error
        raise
    open_standard_fds()  # a loop must not get descriptor 0-2 (pybk.stdio); scripts come here first
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def chosen() -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`run` runs on, for benchmark reports."""
    return "asyncio" if loop_factory() is None else "uvloop"
