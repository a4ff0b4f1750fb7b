"""Synced journal pages leave the page cache (journalRemovePagesFromCache): nothing but replay
reads a journal, so its pages would only grow the cache at the bookie's write rate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.page_cache import PAGE, resident

from bookie.storage.journal_file import JournalFile

MiB = 1024 * 1024


@pytest.mark.parametrize("remove", [True, False])
def test_synced_journal_pages_leave_the_page_cache(tmp_path: Path, remove: bool) -> None:
    journal = JournalFile(tmp_path, 1, 4 * MiB, remove_pages_from_cache=remove)
    try:
        record = os.urandom(64 * 1024 - 100)  # not page-aligned: the offset lands mid-page
        while journal.offset < 3 * MiB + 12345:
            journal.append(record)
            journal.sync()
        offset = journal.offset
    finally:
        journal.close()
    path = next(tmp_path.iterdir())
    synced_steps = offset // MiB * MiB
    if remove:
        assert resident(path, 0, synced_steps) < 0.05
        assert resident(path, synced_steps, offset // PAGE * PAGE) > 0.95  # the tail the next write uses
    else:
        assert resident(path, 0, synced_steps) > 0.95
