"""Start writing a file range back to disk now, without waiting for it (Linux ``sync_file_range``).

Why: a write-cache flush appends tens of MiB to an entry log and then fsyncs it. Left to the page
cache, those pages all reach the device in one burst at the fsync, and a journal ``fdatasync`` on
the same device queues behind the burst; handing each appended MiB to
``sync_file_range(SYNC_FILE_RANGE_WRITE)`` right away keeps the journal's syncs short (measured
with ``pybk bench journal-disk``: docs/performance.md). It is RocksDB's ``bytes_per_sync`` idea.
Durability is unchanged: the final fdatasync still decides.

``os`` has no binding for it, so it goes through ctypes (which drops the GIL during the call).
Elsewhere than Linux, or if the call fails, it does nothing and the fsync does all the work.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start write-out of dirty pages in the range, do not wait


def _load() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_sync_file_range = _load()


def start_write_behind(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` of ``fd``; a hint only."""
    global _sync_file_range
    if _sync_file_range is None or length <= 0:
        return
    if _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE) != 0:
        # e.g. a filesystem that refuses it: stop asking, fsync alone still makes data durable
        log.info("sync_file_range failed (errno %d); entry-log write-behind is off", ctypes.get_errno())
        _sync_file_range = None
