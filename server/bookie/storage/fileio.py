"""Small file helpers shared by the journal, the entry logs and the small state files."""

from __future__ import annotations

import os
from pathlib import Path


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``. A short write is retried rather than reported: on a
    full disk the retry raises ENOSPC, which tells the operator why."""
    view, done = memoryview(data), 0
    while done < len(data):
        written = os.pwrite(fd, view[done:], offset + done)
        if written <= 0:
            raise OSError(f"write made no progress at offset {offset + done}")
        done += written


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path`` durably, old or new after a crash, never half:
    a temporary file, fsync, rename over ``path``, fsync of the directory."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_dir(path.parent)

