"""pybk's standard streams: a large write completes under PYTHONUNBUFFERED though signals cut the
pipe write short, and a process started with a standard descriptor closed does not abort."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from pybk.stdio import WholeWrites

BIG = 2_000_000  # far beyond a pipe's 64 KiB, so the writer blocks and a signal can cut it short

# A writer whose blocking pipe write a timer signal interrupts every 2 ms; under -u the text
# layer writes to the raw file once per print.
INTERRUPTED_PRINT = """
import signal
signal.signal(signal.SIGALRM, lambda *_: None)
signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
print("x" * {big})
signal.setitimer(signal.ITIMER_REAL, 0)
"""

INSTALLERS = {
    "complete_writes": "from pybk.stdio import complete_writes\ncomplete_writes()\n",
    "the pybk entry point": (  # which sets the streams up before it parses (here: a usage error)
        "from pybk.main import main\n"
        "try:\n    main(['--no-such-option'])\nexcept SystemExit:\n    pass\n"
    ),
}


class ShortWriter(io.RawIOBase):
    """Takes at most 3 bytes a call, and reports a full pipe (None) every other call."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = bytearray()
        self._calls = 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 0  # only handed to select(), which the test replaces

    def write(self, b: object) -> int | None:  # type: ignore[override]
        self._calls += 1
        if self._calls % 2 == 0:
            return None
        chunk = bytes(memoryview(b))[:3]  # type: ignore[arg-type]
        self.taken += chunk
        return len(chunk)


def test_whole_writes_retries_short_and_refused_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pybk.stdio.select.select", lambda r, w, x: (r, w, x))  # the pipe "drains"
    raw = ShortWriter()
    assert WholeWrites(raw).write(b"0123456789") == 10
    assert bytes(raw.taken) == b"0123456789"


def _read_slowly(installer: str) -> int:
    """Run the interrupted print under -u and read its pipe slower than it writes: bytes read."""
    script = installer + INTERRUPTED_PRINT.format(big=BIG)
    with subprocess.Popen([sys.executable, "-u", "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        got = 0
        while chunk := proc.stdout.read1(4096):
            got += len(chunk)
            time.sleep(0.0005)
        assert proc.wait(timeout=60) == 0
    return got


def test_the_harness_does_cut_an_unbuffered_print_short() -> None:
    # Without pybk.stdio, Python loses the tail: the test below would prove nothing otherwise.
    assert any(_read_slowly("") < BIG + 1 for _ in range(3))


@pytest.mark.parametrize("installer", INSTALLERS)
def test_an_unbuffered_print_arrives_whole(installer: str) -> None:
    assert _read_slowly(INSTALLERS[installer]) == BIG + 1  # and its newline


def test_a_closed_stdin_does_not_abort_an_event_loop() -> None:
    # uvloop's epoll descriptor would be number 0, and libuv aborts on closing it.
    script = (
        "import asyncio\nfrom pybk import event_loop\n"
        "event_loop.run(asyncio.sleep(0))\nprint('ran')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: os.close(0), env={**os.environ, "PYBK_EVENT_LOOP": "uvloop"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
