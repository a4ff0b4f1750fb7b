"""An entry log keeps only its last ``entryLogPageCacheMB`` in the OS page cache: older synced
pages are dropped after each flush, a finished log's at its close, and entries read back the same
(from disk). With -1, nothing is dropped (BookKeeper's behaviour)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.page_cache import PAGE, resident

from bookie.config import load_config
from bookie.storage.entry_logger import LOCATION, RECORD_HEADER_SIZE, EntryLogger, log_name

MiB = 1024 * 1024
LEDGER = 7
BODY = 4000  # not page-aligned: record boundaries land mid-page


def flush(logger: EntryLogger, first: int, count: int) -> tuple[dict[int, bytes], list[bytes]]:
    """One write-cache flush: ``count`` entries appended, then synced; their bodies and
    locations."""
    bodies = {e: os.urandom(BODY) for e in range(first, first + count)}
    locations = logger.append(LEDGER, sorted(bodies), bodies)[1]
    logger.sync()
    return bodies, locations


def read_back(logger: EntryLogger, bodies: dict[int, bytes], locations: list[bytes]) -> None:
    for entry_id, raw in zip(sorted(bodies), locations, strict=True):
        log_id, offset, length = LOCATION.unpack(raw)
        data = logger.read_span(log_id, offset, RECORD_HEADER_SIZE + length)
        assert EntryLogger.decode(data, 0, LEDGER, entry_id, length) == bodies[entry_id]


@pytest.mark.parametrize("keep_mb", [1, -1])
def test_synced_pages_behind_the_kept_window_leave_the_page_cache(tmp_path: Path, keep_mb: int) -> None:
    keep = keep_mb * MiB if keep_mb >= 0 else -1
    logger = EntryLogger(tmp_path, 64 * MiB, page_cache_keep=keep)
    bodies: dict[int, bytes] = {}
    locations: list[bytes] = []
    try:
        for n in range(12):  # 12 flushes of ~400 KiB: ~4.7 MiB in all
            batch, batch_locations = flush(logger, n * 100, 100)
            bodies.update(batch)
            locations += batch_locations
        end = logger.position().offset
        path = tmp_path / log_name(logger.current_id)
        window_start = (end - keep) // MiB * MiB if keep >= 0 else 0
        if keep >= 0:
            assert window_start >= 3 * MiB
            assert resident(path, 0, window_start) < 0.05
        # the window itself stays: a catch-up reader just behind the writer reads from memory
        assert resident(path, window_start, end // PAGE * PAGE) > 0.95
        read_back(logger, bodies, locations)  # dropped or not, every entry reads back the same
    finally:
        logger.close()


def test_a_finished_log_leaves_the_page_cache_when_a_limit_is_set(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path, 2 * MiB, page_cache_keep=1 * MiB)
    try:
        for n in range(8):  # ~3.2 MiB: the first log rolls over at 2 MiB
            flush(logger, n * 100, 100)
        assert logger.current_id == 1
        assert logger.finished_log_ids() == [0]
        finished = tmp_path / log_name(0)
        assert resident(finished, 0, finished.stat().st_size // PAGE * PAGE) < 0.05
    finally:
        logger.close()


def test_entry_log_page_cache_key() -> None:
    assert load_config(None, {}).storage_config().entry_log_page_cache_bytes == 128 * MiB
    unlimited = load_config(None, {"BK_entryLogPageCacheMB": "-1"}).storage_config()
    assert unlimited.entry_log_page_cache_bytes == -1
    none_kept = load_config(None, {"BK_entryLogPageCacheMB": "0"}).storage_config()
    assert none_kept.entry_log_page_cache_bytes == 0
