"""Small file helpers shared by the journal and the entry logs."""

from __future__ import annotations

import os


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``. A short write is retried rather than reported: on a
    full disk the retry raises ENOSPC, which tells the operator why."""
    view, done = memoryview(data), 0
    while done < len(data):
        written = os.pwrite(fd, view[done:], offset + done)
        if written <= 0:
            raise OSError(f"write made no progress at offset {offset + done}")
        done += written
