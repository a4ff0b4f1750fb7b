"""glibc malloc settings for pybk's processes (bookies, benchmarks, tools), made before they start
their threads and allocate their large buffers.

Why: an add-stream message is a buffer of up to a few MiB (a batch of entries), allocated and freed
many times a second on each side: the bookie's socket reader grows a ``bytearray`` to the frame's
size and copies it into a ``bytes``, the client joins the batch and frames it. Above glibc's mmap
threshold (128 KiB to start with, moved by glibc's own heuristics) each of those is a fresh
``mmap``, and every 4 KiB page of it is a page fault the first time it is written, which costs more
than copying the data itself, the most on a VM (docs/cost-model.md has the profile and the figures).
With the threshold at the largest message either side handles, such buffers come from the heap
and their pages are reused; the trim threshold keeps freed memory at the heap's top for the next
message rather than handing it back to the kernel after each one. Both stay bounded: the heap
keeps at most the trim threshold of free memory at its top, inside the bookie's RSS allowance.

The environment decides when it sets them itself (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX`` or their ``GLIBC_TUNABLES``); elsewhere than glibc
this does nothing. An application using ``bkclient`` in its own process can set the same
environment variables (values in :data:`MMAP_THRESHOLD_BYTES` and :data:`TRIM_THRESHOLD_BYTES`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

from bkproto.add_port import MAX_FRAME_BYTES

log = logging.getLogger(__name__)

# glibc mallopt parameters
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# The largest message of either side (the add port's frame limit, as gRPC's message limit).
MMAP_THRESHOLD_BYTES = MAX_FRAME_BYTES
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def _mallopt(parameter: int, value: int, env_name: str, tunable: str) -> None:
    """``mallopt(parameter, value)`` unless the environment sets it (``env_name`` or the
    ``glibc.malloc.<tunable>`` of ``GLIBC_TUNABLES``)."""
    if sys.platform != "linux" or env_name in os.environ:
        return
    if f"glibc.malloc.{tunable}=" in os.environ.get("GLIBC_TUNABLES", ""):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        if not libc.mallopt(parameter, value):
            log.debug("mallopt(%d, %d) refused", parameter, value)
    except (OSError, AttributeError):
        log.debug("mallopt unavailable; malloc settings left as they are")


def keep_large_buffers() -> None:
    """Large buffers from the heap and reused (module docstring); call before the hot path runs."""
    _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES, "MALLOC_MMAP_THRESHOLD_", "mmap_threshold")
    _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES, "MALLOC_TRIM_THRESHOLD_", "trim_threshold")


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas before the journal, flush and gRPC threads start.

    Those threads each allocate entry-sized buffers; with one arena per thread, freed memory is
    scattered and RSS grew higher under a large add window (docs/performance.md).
    Same effect as MALLOC_ARENA_MAX=2; a no-op where glibc is not the allocator.
    """
    _mallopt(M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX", "arena_max")
