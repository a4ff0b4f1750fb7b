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


def wanted(quiet: bool = False, stream: TextIO | None = None) -> bool:
    """Whether to draw: stderr is a terminal and the caller has no reason to be quiet (--json)."""
    stream = sys.stderr if stream is None else stream  # looked up now: tests replace sys.stderr
    return not quiet and stream.isatty()


class Progress:
    """A progress bar of ``total`` units (None: not known yet, or never: a counter with a rate),
    updated with the number done so far. Use as a context manager or call ``done()``."""

    def __init__(self, total: int | None = None, unit: str = "entries", description: str = "",
                 quiet: bool = False, stream: TextIO | None = None, min_total: int = SMALL_WORK) -> None:
        self._min_total = min_total
        self._stream = sys.stderr if stream is None else stream
        self._unit = unit
        self._description = description
        self._enabled = wanted(quiet, self._stream)
        self._bar: tqdm[Never] | None = None
        self._total = total
        if total is not None:
            self._open(total)

    def _open(self, total: int | None) -> None:
        if self._bar is None and self._enabled and (total is None or total >= self._min_total):
            self._bar = tqdm(total=total, unit=f" {self._unit}", desc=self._description or None,
                             file=self._stream, leave=False, mininterval=MIN_INTERVAL_S, unit_scale=True,
                             dynamic_ncols=True)
        self._enabled = False  # decided: a bar now, or none for good

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` units finished so far (not an increment); ``total`` when it was not known at
        the start (the first call with it decides whether a bar is worth drawing)."""
        if self._enabled:
            self._open(total if total is not None else self._total)
        bar = self._bar
        if bar is not None and done > bar.n:
            bar.update(done - bar.n)

    def advance(self, units: int = 1) -> None:
        if self._enabled:
            self._open(self._total)
        if self._bar is not None:
            self._bar.update(units)

    def done(self) -> None:
        self._enabled = False
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.done()
