"""JournalFile over real files: the zero-filling helper never touches what the writer wrote."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bookie.api import LogMark
from bookie.storage.journal import Journal, JournalSettings
from bookie.storage.journal_file import JournalFile
from bookie.storage.journal_format import FILE_HEADER_SIZE, check_file_header, file_name
from bookie.storage.stats import StorageStats


def _append_random(file: JournalFile, count: int, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    written = bytearray()
    for _ in range(count):
        data = rng.randbytes(rng.randint(1, max_size))
        file.append(data)
        written += data
    return bytes(written)


@pytest.mark.parametrize(
    ("fill_ahead", "max_size"),
    [
        (64 * 1024, 4096),  # the helper stays ahead: the writer mostly writes into filled blocks
        (4096, 64 * 1024),  # the writer overtakes the helper all the time and appends past it
    ],
)
def test_writer_bytes_survive_the_helper(tmp_path: Path, fill_ahead: int, max_size: int) -> None:
    file = JournalFile(tmp_path, 7, fill_ahead)
    written = _append_random(file, 3000, max_size, seed=fill_ahead)
    file.sync()
    end = file.offset
    file.close()
    data = (tmp_path / file_name(7)).read_bytes()
    assert check_file_header(data, 7)
    assert end == FILE_HEADER_SIZE + len(written)
    assert data[FILE_HEADER_SIZE:end] == written
    assert data[end:].count(0) == len(data) - end  # whatever lies beyond is zero fill


def test_helper_keeps_the_file_filled_ahead_of_the_writer(tmp_path: Path) -> None:
    fill_ahead = 256 * 1024
    file = JournalFile(tmp_path, 1, fill_ahead)
    path = tmp_path / file_name(1)
    try:
        file.append(os.urandom(600 * 1024))  # past everything filled so far
        deadline = time.monotonic() + 10
        while path.stat().st_size < file.offset + fill_ahead and time.monotonic() < deadline:
            time.sleep(0.01)
        assert path.stat().st_size >= file.offset + fill_ahead
    finally:
        file.close()


def test_replay_makes_the_journal_directory_and_stops_at_one_that_is_a_file(tmp_path: Path) -> None:
    """Replay lists the journal's files first, making the directory: a path that cannot be one
    stops the bookie's start there, rather than letting it start read-only."""

    def replayed(directory: Path) -> list[object]:
        settings = JournalSettings(directory, 1 << 20, 1 << 26, 5, 100, 0.002, 512 * 1024, False, True)
        return list(Journal(settings, StorageStats(CollectorRegistry())).replay(LogMark(0, 0)))

    assert replayed(tmp_path / "fresh" / "current") == []
    assert (tmp_path / "fresh" / "current").is_dir()
    (tmp_path / "current").write_bytes(b"not a directory")
    with pytest.raises(FileExistsError):
        replayed(tmp_path / "current")
