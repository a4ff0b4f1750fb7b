"""The event loop pybk's processes run on: uvloop's unless PYBK_EVENT_LOOP says asyncio, a clear
error for anything else, and the `pybk` entry point running a command's coroutine on it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import uvloop

from pybk import event_loop
from pybk.event_loop import ENV, EventLoopChoiceError


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


@pytest.mark.parametrize("value", ["", "uvloop", " UVloop "])
def test_uvloop_unless_asked_otherwise(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV, value)
    assert event_loop.run(_loop_type()) is uvloop.Loop
    assert event_loop.chosen() == "uvloop"


def test_unset_is_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert event_loop.run(_loop_type()) is uvloop.Loop


def test_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "asyncio")
    loop_type = event_loop.run(_loop_type())
    assert issubclass(loop_type, asyncio.BaseEventLoop) and not issubclass(loop_type, uvloop.Loop)
    assert event_loop.chosen() == "asyncio"


def test_an_unknown_loop_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "trio")
    with pytest.raises(EventLoopChoiceError, match=r"PYBK_EVENT_LOOP='trio': expected one of uvloop"):
        event_loop.run(_loop_type())  # the coroutine is closed: no "never awaited" warning (an error here)


def test_the_pybk_entry_point_reports_a_bad_choice_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pybk", "bench", "metadata", "--zk", "127.0.0.1:1", "--ops", "1"],
        env={**os.environ, ENV: "trio"}, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done
    assert "PYBK_EVENT_LOOP='trio'" in done.stderr and "Traceback" not in done.stderr

