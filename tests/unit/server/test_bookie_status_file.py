"""The BOOKIE_STATUS file (persistBookieStatusEnabled): BookKeeper's layout-1 text in every ledger
directory, the newest readable copy wins, and one bad directory costs only its own copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.config import load_config
from bookie.status_file import STATUS_FILE_NAME, BookieStatusFiles, PersistedStatus


def test_the_status_is_bookkeepers_line_in_every_ledger_directory(tmp_path: Path) -> None:
    files = BookieStatusFiles([tmp_path / "a", tmp_path / "b"])
    assert files.write(True)
    for directory in ("a", "b"):
        version, mode, updated = (tmp_path / directory / "current" / STATUS_FILE_NAME).read_text().split(",")
        assert (version, mode) == ("1", "READ_ONLY") and updated.endswith("\n") and int(updated) > 0
    assert not list(tmp_path.glob("*/current/*.tmp"))  # replaced atomically, nothing left over
    status = files.read()
    assert status is not None and status.read_only
    assert files.write(False)
    status = files.read()
    assert status is not None and not status.read_only


def test_the_newest_readable_copy_wins(tmp_path: Path) -> None:
    files = BookieStatusFiles([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    files.write(False)
    files.paths[0].write_text(PersistedStatus(True, 1).line())  # older than the others
    files.paths[1].write_text(PersistedStatus(True, 2**62).line())  # the newest
    assert files.read() == PersistedStatus(True, 2**62)
    files.paths[1].write_text("1,READ_ONLY")  # damaged: skipped
    files.paths[2].write_bytes(b"\xff\xfe")
    assert files.read() == PersistedStatus(True, 1)
    for path in files.paths:
        path.unlink()
    assert files.read() is None  # a first start


def test_a_directory_that_cannot_be_written_costs_only_its_copy(tmp_path: Path) -> None:
    (tmp_path / "broken").write_text("a file where the directory should be")
    files = BookieStatusFiles([tmp_path / "broken", tmp_path / "good"])
    assert files.write(True)
    assert files.read() is not None and files.paths[1].exists()
    assert not BookieStatusFiles([tmp_path / "broken"]).write(True)  # nowhere: reported


def test_a_damaged_line_is_refused_with_what_was_wrong() -> None:
    for text in ("", "2,READ_ONLY,5", "1,READONLY,5", "1,READ_ONLY"):
        with pytest.raises(ValueError, match="not a layout-1 bookie status"):
            PersistedStatus.parse(text)
    assert PersistedStatus.parse(" 1,READ_WRITE, 7 \n") == PersistedStatus(False, 7)


def test_persistence_is_off_by_default_and_set_by_bookkeepers_key() -> None:
    assert not load_config(None, {}, {}).read_only.persist_status
    assert load_config(None, {"BK_persistBookieStatusEnabled": "true"}).read_only.persist_status
