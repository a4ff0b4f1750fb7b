"""The offline tools over a real ledger directory (real files, real RocksDB): the consistency
check finds damaged, missing and unindexed entries; the rebuild restores a lost location index
from the entry logs; and a bookie refuses a directory whose location index is gone."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.storage.entry_logger import LOG_HEADER_SIZE, RECORD_HEADER_SIZE, log_name
from bookie.storage.flush_pacer import FlushPacer
from bookie.storage.indexes import LedgerRecord
from bookie.storage.ledger_directory import LedgerDirectory, LostIndexError, index_locks
from bookie.storage.offline import DirectoryInUseError, check_directory, rebuild_locations

BODY = 100


def body(ledger_id: int, entry_id: int) -> bytes:
    return (b"%d/%d:" % (ledger_id, entry_id)).ljust(BODY, b"x")


def filled(root: Path, ledgers: dict[int, int]) -> LedgerDirectory:
    """A directory holding ``count`` entries of each ledger, flushed (two flushes, two logs)."""
    directory = LedgerDirectory(root, entry_log_size_limit=1 << 30)
    for ledger_id in ledgers:
        directory.ledgers.put(ledger_id, LedgerRecord(b"key"))
    for half in (0, 1):
        batch = []
        for ledger_id, count in sorted(ledgers.items()):
            ids = range(half * count // 2, (half + 1) * count // 2)
            batch.append((ledger_id, {e: body(ledger_id, e) for e in ids}))
        directory.flush_ledgers(batch, FlushPacer(1, 0.0))
        directory.entry_logger.close()  # the next flush starts a new log, as after a restart
    return directory


def read_all(directory: LedgerDirectory, ledger_id: int, count: int) -> list[bytes]:
    return [body for _, body in directory.read_run(ledger_id, 0, count, 1 << 30)]


def test_a_healthy_directory_checks_out(tmp_path: Path) -> None:
    filled(tmp_path, {1: 10, 2: 6}).close()
    report = check_directory(tmp_path)
    assert report.ok and report.ledgers == 2 and report.entries_checked == 16, report


def test_the_check_names_a_damaged_entry_and_entries_the_index_lacks(tmp_path: Path) -> None:
    directory = filled(tmp_path, {1: 10, 2: 6})
    directory.locations.delete_ledger(2)  # as if the index lost them
    directory.close()
    log = tmp_path / "current" / log_name(0)
    with open(log, "r+b") as f:  # one byte of the first entry's body
        f.seek(LOG_HEADER_SIZE + RECORD_HEADER_SIZE + 3)
        f.write(b"!")
    report = check_directory(tmp_path)
    assert not report.ok
    assert report.bad_entries == 1 and report.entries_checked == 10
    assert report.unindexed_entries == 6
    assert any("entry 1/0" in p and "checksum" in p for p in report.problems), report.problems
    assert any("entry 2/" in p and "not in the index" in p for p in report.problems), report.problems


def test_rebuild_restores_a_lost_index_and_skips_deleted_ledgers(tmp_path: Path) -> None:
    directory = filled(tmp_path, {1: 10, 2: 6, 3: 4})
    directory.ledgers.delete(3)  # deleted by garbage collection, its entries still in the logs
    directory.close()
    index = tmp_path / "current" / "locations"
    shutil.rmtree(index)

    for _ in range(2):  # the first refusal leaves nothing behind that would let the next through
        with pytest.raises(LostIndexError, match="rebuild-db-ledger-locations-index"):
            LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)

    report = rebuild_locations(tmp_path)
    assert (report.entries_indexed, report.entries_skipped, report.logs_scanned) == (16, 4, 2)
    assert not report.unreadable_logs and not report.damaged
    assert check_directory(tmp_path).ok
    directory = LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)
    try:
        assert read_all(directory, 1, 10) == [body(1, e) for e in range(10)]
        assert read_all(directory, 2, 6) == [body(2, e) for e in range(6)]
        assert directory.locations.entry_ids(3) == []
    finally:
        directory.close()


def test_rebuild_keeps_the_old_index_and_the_newest_copy_of_an_entry(tmp_path: Path) -> None:
    directory = filled(tmp_path, {1: 4})
    # a compaction copied entry 0 into a newer log: the index points there
    directory.flush_ledgers([(1, {0: body(1, 0)})], FlushPacer(1, 0.0))
    moved = directory.locations.get(1, 0)
    directory.close()
    report = rebuild_locations(tmp_path)
    assert report.backup is not None and Path(report.backup).is_dir()
    directory = LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)
    try:
        assert directory.locations.get(1, 0) == moved
    finally:
        directory.close()


@contextlib.contextmanager
def held_by_another_process(root: Path) -> Iterator[None]:
    """The directory open in another process, as a running bookie holds it (RocksDB's locks
    belong to a process: one in this process would not keep this process out)."""
    script = (
        "import sys; from pathlib import Path; from bookie.storage.ledger_directory import LedgerDirectory;"
        f" d = LedgerDirectory(Path({str(root)!r}), 1 << 30); print('ready', flush=True); sys.stdin.read()"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        yield
    finally:
        holder.communicate("", timeout=30)


def test_rebuild_and_check_are_refused_while_a_bookie_holds_the_directory(tmp_path: Path) -> None:
    filled(tmp_path, {1: 4}).close()
    with held_by_another_process(tmp_path):
        with pytest.raises(DirectoryInUseError, match="running bookie"):
            rebuild_locations(tmp_path)
        with pytest.raises(DirectoryInUseError):  # its flushes and GC would change files under it
            check_directory(tmp_path)
    # and a bookie cannot start while a tool works: the tool holds the same locks
    with index_locks([tmp_path]):
        script = ("from pathlib import Path; from bookie.storage.ledger_directory import LedgerDirectory;"
                  f" LedgerDirectory(Path({str(tmp_path)!r}), 1 << 30)")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        started = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                 check=False)
        assert started.returncode != 0 and "DirectoryInUseError" in started.stderr
    assert check_directory(tmp_path).ok  # nothing left held


def test_checking_a_directory_without_an_index_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "current").mkdir()
    (tmp_path / "current" / "notes.txt").write_text("not a bookie's")
    report = check_directory(tmp_path)
    assert not report.ok and len(report.index_problems) == 2
    assert sorted(p.name for p in (tmp_path / "current").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("damage", ["emptied", "bad CURRENT"])
def test_an_emptied_or_damaged_index_is_refused_and_rebuilt(tmp_path: Path, damage: str) -> None:
    filled(tmp_path, {1: 6}).close()
    index = tmp_path / "current" / "locations"
    if damage == "emptied":  # the directory left, its files gone: RocksDB would start afresh
        for path in index.iterdir():
            path.unlink()
    else:
        (index / "CURRENT").write_text("MANIFEST-999999\n")
    with pytest.raises(LostIndexError, match="rebuild-db-ledger-locations-index"):
        LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)
    report = check_directory(tmp_path)
    assert not report.ok and report.index_problems and report.unindexed_entries == 6

    rebuilt = rebuild_locations(tmp_path)
    assert rebuilt.entries_indexed == 6 and rebuilt.backup is not None
    directory = LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)
    try:
        assert read_all(directory, 1, 6) == [body(1, e) for e in range(6)]
    finally:
        directory.close()


def test_rebuild_indexes_an_older_intact_copy_over_a_newer_damaged_one(tmp_path: Path) -> None:
    directory = filled(tmp_path, {1: 4})
    directory.flush_ledgers([(1, {0: body(1, 0)})], FlushPacer(1, 0.0))  # a compaction's copy
    log_id, offset, _length = directory.locations.get(1, 0)  # type: ignore[misc]
    directory.close()
    with open(tmp_path / "current" / log_name(log_id), "r+b") as f:  # the copy torn
        f.seek(offset + RECORD_HEADER_SIZE + 5)
        f.write(b"#")
    report = rebuild_locations(tmp_path)
    assert report.damaged == 1 and "entry 1/0" in report.damaged_entries[0]
    directory = LedgerDirectory(tmp_path, entry_log_size_limit=1 << 30)
    try:
        assert directory.locations.get(1, 0)[0] == 0  # type: ignore[index]  # the original, log 0
        assert read_all(directory, 1, 4) == [body(1, e) for e in range(4)]
    finally:
        directory.close()


def test_a_directory_that_is_not_a_bookies_is_not_reported_as_checked(tmp_path: Path) -> None:
    report = check_directory(tmp_path / "nothing-here")
    assert not report.checked and not report.ok
