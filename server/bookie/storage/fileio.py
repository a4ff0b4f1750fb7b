"""Small file helpers shared by the journal, the entry logs and the small state files."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

# A file's bytes as the readers take them: read whole, or mapped.
ByteSource = bytes | mmap.mmap


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


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[ByteSource]:
    """``path``'s content, mapped rather than read: a journal file grows to 2 GiB before it
    rolls, and replaying it from its mark then touches only the pages past the mark."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""  # mmap refuses an empty file
            return
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield data
    finally:
        with contextlib.suppress(BufferError):  # a view of it is still alive: freed with that
            data.close()
