"""Which pages of a file are in the OS page cache (``mincore`` on a mapping), for the tests of
the storage files that drop their synced pages."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

import pytest

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident(path: Path, start: int, end: int) -> float:
    """Share of the file's pages in [start, end) that are in the page cache (mincore)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), end, access=mmap.ACCESS_COPY)  # writable: from_buffer needs it
        try:
            base = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
            pages = (end - start) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(base + start), ctypes.c_size_t(end - start), vec) != 0:
                pytest.skip(f"mincore failed: errno {ctypes.get_errno()}")
            return sum(v & 1 for v in vec) / pages
        finally:
            mapped.close()
