"""Entry-log write-behind is a hint: a refused call never fails a flush."""

from __future__ import annotations

import logging

import pytest

from bookie.storage import write_behind


def test_write_behind_turns_itself_off_when_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if write_behind._sync_file_range is None:
        pytest.skip("sync_file_range is Linux-only; elsewhere write-behind is off from the start")
    monkeypatch.setattr(write_behind, "_sync_file_range", write_behind._sync_file_range)
    with caplog.at_level(logging.INFO, logger=write_behind.__name__):
        write_behind.start_write_behind(-1, 0, 4096)  # EBADF: refused, not raised
    assert write_behind._sync_file_range is None
    assert "write-behind is off" in caplog.text
    write_behind.start_write_behind(-1, 0, 4096)  # and no longer tried
