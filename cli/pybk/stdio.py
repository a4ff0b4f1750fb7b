"""Standard streams a ``pybk`` process can rely on, whatever it was started with.

Two ways the environment can break a command before it has done anything wrong:

- **Unbuffered output loses the tail of a large write.** Under ``PYTHONUNBUFFERED=1`` (common in
  container images) or ``python -u``, ``sys.stdout`` writes straight to the raw file, and a write
  to a pipe that a signal interrupts part-way (SIGCHLD from a child exiting, a timer) returns
  short. The text layer does not retry: the rest of the object is silently dropped (``pybk
  verify --json`` lost the end of its report that way while its cluster's processes exited).
  :func:`complete_writes` puts a layer under the text stream that writes until all is written,
  still unbuffered.
- **A closed standard descriptor is reused.** Started with stdin closed (``<&-``, some
  supervisors), the first descriptor a process opens gets number 0; uvloop's epoll descriptor did,
  and libuv aborts the process when it closes a descriptor at or below 2.
  :func:`open_standard_fds` puts ``/dev/null`` on any of 0, 1, 2 that is closed.
"""

from __future__ import annotations

import io
import os
import select
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

STANDARD_FDS = (0, 1, 2)


class WholeWrites(io.RawIOBase):
    """A raw writer whose ``write`` returns only once every byte is written."""

    def __init__(self, raw: io.RawIOBase) -> None:
        super().__init__()
        self._raw = raw

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def isatty(self) -> bool:
        return self._raw.isatty()

    def write(self, b: ReadableBuffer) -> int:
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            n = self._raw.write(view[done:])
            if n is None:  # a non-blocking descriptor whose pipe is full: wait for room
                select.select([], [self.fileno()], [])
                continue
            done += n
        return done


def complete_writes() -> None:
    """Give an unbuffered ``sys.stdout`` and ``sys.stderr`` writes that complete (see above);
    buffered streams already retry short writes and are left as they are. ``sys.__stdout__``
    and ``sys.__stderr__`` stay the streams Python made, still usable."""
    sys.stdout = _whole(sys.stdout)
    sys.stderr = _whole(sys.stderr)


def _whole(stream: TextIO) -> TextIO:
    if not isinstance(stream, io.TextIOWrapper) or not isinstance(stream.buffer, io.RawIOBase):
        return stream
    stream.flush()
    raw = io.FileIO(stream.fileno(), "w", closefd=False)  # the descriptor stays the old stream's too
    # typeshed types the layer below as buffered; a raw one is what Python itself puts there under -u.
    return io.TextIOWrapper(WholeWrites(raw), encoding=stream.encoding,  # type: ignore[type-var]
                            errors=stream.errors, line_buffering=stream.line_buffering,
                            write_through=True)


def open_standard_fds() -> None:
    """Put ``/dev/null`` on each of descriptors 0, 1 and 2 that is closed (see above)."""
    for fd in STANDARD_FDS:
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:  # taken in order, the lowest free number is this one; this is a guard
                os.dup2(null, fd)
                os.close(null)
