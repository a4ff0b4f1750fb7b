"""Tests marked ``both_loops`` run once on asyncio's event loop and once on uvloop's.

Why: pybk's processes run on uvloop (``pybk.event_loop``), and an application that embeds the
client may run it on either. The two loops differ where the add port and the read stream live:
uvloop's transports are not ``asyncio.Transport`` subclasses, and it hands a protocol that is also
an ``asyncio.Protocol`` its bytes through ``data_received`` instead of ``get_buffer``. So the tests
that run those protocols over real loopback sockets run on both (pytest-asyncio's loop factories).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

ASYNCIO_LOOP: Mapping[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
BOTH_LOOPS: Mapping[str, LoopFactory] = {**ASYNCIO_LOOP, "uvloop": uvloop.new_event_loop}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_loops: run the async test on asyncio's and uvloop's event loops")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory] | None:
    """The loops an async test runs on (a hook must name at least one: asyncio's for the rest)."""
    return BOTH_LOOPS if item.get_closest_marker("both_loops") is not None else ASYNCIO_LOOP
