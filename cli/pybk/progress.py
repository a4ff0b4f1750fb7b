"""Progress bars for long work (benchmarks, ``shell recover``, ``decommissionbookie``,
``simpletest``, ``readledger`` of a large range), drawn with tqdm on stderr.

Quiet unless stderr is a terminal, and quiet with ``--json``: scripts and pipes get the result
alone. A bar redraws at most every ``MIN_INTERVAL_S``, so updating it costs little on a hot path,
and it is erased when the work ends, leaving only the command's own output.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Never, TextIO

from tqdm import tqdm

MIN_INTERVAL_S = 0.5
# Below this many units a bar is not worth drawing (the work is done before it would show).
SMALL_WORK = 200


def wanted(as_json: bool = False, stream: TextIO | None = None) -> bool:
    """Whether to draw: stderr is a terminal and the output is not JSON."""
    stream = sys.stderr if stream is None else stream  # looked up now: tests replace sys.stderr
    return not as_json and stream.isatty()


class Progress:
    """A progress bar of ``total`` units (None: unknown, a counter with a rate), updated with the
    number done so far. Use as a context manager or call ``done()``."""

    def __init__(self, total: int | None, unit: str = "entries", description: str = "",
                 as_json: bool = False, stream: TextIO | None = None) -> None:
        stream = sys.stderr if stream is None else stream
        enabled = wanted(as_json, stream) and (total is None or total >= SMALL_WORK)
        self._bar: tqdm[Never] | None = (
            tqdm(total=total, unit=f" {unit}", desc=description or None, file=stream, leave=False,
                 mininterval=MIN_INTERVAL_S, unit_scale=True, dynamic_ncols=True)
            if enabled else None
        )

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def update(self, done: int) -> None:
        """``done`` units finished so far (not an increment)."""
        bar = self._bar
        if bar is not None and done > bar.n:
            bar.update(done - bar.n)

    def advance(self, units: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(units)

    def done(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.done()
