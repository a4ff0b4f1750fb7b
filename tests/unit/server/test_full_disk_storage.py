"""Storage on a disk that fills up: failed flushes are retried without eating more space, a
journal that cannot roll over fails cleanly, and a bookie restarts whatever its flushes do.
Real files and RocksDB; the disk errors are raised where the storage meets the disk."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import pytest
from tests.support.storage_helpers import add_all, add_op, make_bookie, make_config

from bookie.bookie import Bookie
from bookie.storage.entry_logger import RECORD_HEADER_SIZE, EntryLogger, log_name
from bookie.storage.indexes import LedgerIndex, LedgerRecord
from bookie.storage.journal_file import AppendFile
from bookie.storage.kv import MemoryKeyValueStorage


@pytest.fixture
async def bookie(tmp_path: Path) -> AsyncIterator[Bookie]:
    async with make_bookie(make_config(tmp_path)) as b:
        yield b


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _fails_once(real: Callable[..., object]) -> Callable[..., object]:
    calls = 0

    def call(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            _no_space()
        return real(*args)

    return call


def _copy_bytes(ops: list[object]) -> int:
    return sum(RECORD_HEADER_SIZE + len(op.body) for op in ops)  # type: ignore[attr-defined]


async def test_a_flush_that_failed_on_a_full_disk_is_retried_over_the_same_bytes(bookie: Bookie) -> None:
    logger = bookie.storage.dirs[0].entry_logger
    await add_all(bookie, [add_op(5, e) for e in range(3)])
    await bookie.storage.checkpoint()
    before = logger.position()
    logger.sync = _fails_once(logger.sync)  # type: ignore[method-assign]
    ops = [add_op(5, e) for e in range(3, 103)]
    await add_all(bookie, ops)
    with pytest.raises(OSError):
        await bookie.storage.checkpoint()
    assert bookie.storage.health.flush_failure is not None
    path = logger.directory / log_name(before.log_id)
    assert path.stat().st_size == before.offset  # cut back: no stale records past the end
    await bookie.storage.checkpoint()  # the retry writes where the failed attempt did
    assert bookie.storage.health.flush_failure is None
    assert logger.position().offset == before.offset + _copy_bytes(ops)
    for e in range(103):
        assert await bookie.read_entry(5, e) == add_op(5, e).body


async def test_with_several_directories_a_retry_writes_only_what_failed(tmp_path: Path) -> None:
    config = make_config(tmp_path, ledger_dirs=[tmp_path / "a", tmp_path / "b"])
    async with make_bookie(config) as bookie:
        healthy, full = bookie.storage.dirs  # ledger 10 goes to the first, 11 to the second
        full.entry_logger.append = _fails_once(full.entry_logger.append)  # type: ignore[method-assign]
        ops = [add_op(ledger_id, e) for ledger_id in (10, 11) for e in range(50)]
        await add_all(bookie, ops)
        with pytest.raises(OSError):
            await bookie.storage.checkpoint()
        await bookie.storage.checkpoint()
        # ledger 10 was written and indexed by the first attempt; the retry left it alone
        assert healthy.entry_logger.position().ledger_bytes == {10: _copy_bytes(ops[:50])}
        assert full.entry_logger.position().ledger_bytes == {11: _copy_bytes(ops[50:])}
        for op in ops:
            assert await bookie.read_entry(op.ledger_id, op.entry_id) == op.body


async def test_a_failed_flush_during_replay_does_not_stop_the_start(tmp_path: Path) -> None:
    payload = bytes(64 * 1024)
    ops = [add_op(8, e, payload=payload) for e in range(48)]  # 3 MiB, not flushed (64 MiB cache)
    async with make_bookie(make_config(tmp_path, write_cache_max_size_mb=64)) as bookie:
        await add_all(bookie, ops)
        bookie.abandon()
    # a 4 MiB cache fills its 2 MiB half during the replay: that flush fails, the start goes on
    config = make_config(tmp_path, write_cache_max_size_mb=4)
    full = make_config(tmp_path, write_cache_max_size_mb=4, min_usable_for_entry_log_bytes=1 << 62)
    async with make_bookie(full) as bookie:
        assert bookie.storage.health.flush_failure is not None  # the bookie turns read-only
        for op in ops:
            assert await bookie.read_entry(8, op.entry_id) == op.body
        bookie.abandon()  # closing would flush again and fail
    async with make_bookie(config) as bookie:  # space back: all there, and flushed at start
        assert bookie.storage.health.flush_failure is None
        for op in ops:
            assert await bookie.read_entry(8, op.entry_id) == op.body


async def test_a_journal_that_cannot_roll_over_fails_without_closing_a_strangers_fd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path, journal_max_size_mb=1)
    async with make_bookie(config) as bookie:
        journal = bookie.storage.journals[0]
        files = journal._files
        create = files.create
        opened: list[AppendFile] = []

        def first_file_only(journal_id: int) -> AppendFile:
            if opened:
                _no_space()
            opened.append(create(journal_id))
            return opened[-1]

        journal._file.close()  # type: ignore[union-attr]  # start over with the patched opener
        monkeypatch.setattr(files, "create", first_file_only)
        journal._open_file(journal._file.journal_id + 1)  # type: ignore[union-attr]
        payload = bytes(256 * 1024)
        statuses = [(await bookie.add_entries([add_op(9, e, payload=payload)]))[0].status for e in range(6)]
        assert bookie.storage.health.journal_failure is not None and statuses[-1] != 0
        stranger = os.open(tmp_path / "stranger", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            await journal.close()
            os.fstat(stranger)  # still open: close() did not close the old file's number again
        finally:
            os.close(stranger)
        bookie.abandon()


def test_a_new_entry_log_needs_its_reserve_of_free_space(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path, 1024 * 1024, reserve_bytes=1 << 62)
    with pytest.raises(OSError, match="less than minUsableSizeForEntryLogCreation") as caught:
        logger.append(1, [0], {0: add_op(1, 0).body})
    assert caught.value.errno == errno.ENOSPC and not list(tmp_path.iterdir())


class RefusingKv(MemoryKeyValueStorage):
    """RocksDB after one failed write: every later write is refused until it is reopened."""

    refusing = False

    def _check(self) -> None:
        if self.refusing:
            raise RuntimeError("IO error: Writer has previous error.")

    def put(self, key: bytes, value: bytes) -> None:
        self._check()
        super().put(key, value)

    def write_batch(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self._check()
        super().write_batch(items)

    def delete(self, key: bytes) -> None:
        self._check()
        super().delete(key)

    def sync(self) -> None:
        self._check()
        super().sync()

    def close(self) -> None:  # the test's crash simulation closes the handles
        self.refusing = False
        super().close()


def test_ledger_records_the_index_refused_wait_in_memory_and_block_the_sync() -> None:
    kv = RefusingKv()
    index = LedgerIndex(kv)
    index.put(1, LedgerRecord(b"k" * 20))
    index.sync()
    kv.refusing = True
    index.put(2, LedgerRecord(b"k" * 20, fenced=True))  # no error: the journal has it
    index.delete(1)
    assert index.get(2) == LedgerRecord(b"k" * 20, fenced=True) and index.get(1) is None
    assert index.ids() == [2]
    with pytest.raises(RuntimeError, match="Writer has previous error"):
        index.sync()  # so no checkpoint moves past their journal records
    kv.refusing = False  # reopened
    index.sync()
    fresh = LedgerIndex(kv)  # no cache: what the store holds
    assert fresh.get(2) == LedgerRecord(b"k" * 20, fenced=True) and fresh.get(1) is None


async def test_a_bookie_whose_index_refuses_writes_still_replays_its_journal(tmp_path: Path) -> None:
    """Fences and new ledgers in the journal are applied in memory; the bookie starts read-only,
    and a start with a working index later gets everything."""
    config = make_config(tmp_path)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(12, e) for e in range(3)])
        await bookie.fence(12, add_op(12, 0).master_key)
        bookie.abandon()

    def refusing(path: Path, *, create: bool = True) -> MemoryKeyValueStorage:
        kv = RefusingKv()
        kv.refusing = True
        return kv

    async with make_bookie(config, kv_factory=refusing) as bookie:
        assert bookie.storage.health.index_failure is not None
        record = bookie.storage.dir_for(12).ledgers.get(12)
        assert record is not None and record.fenced
        for e in range(3):
            assert await bookie.read_entry(12, e) == add_op(12, e).body
        bookie.abandon()
    async with make_bookie(config) as bookie:
        record = bookie.storage.dir_for(12).ledgers.get(12)
        assert record is not None and record.fenced
        assert await bookie.read_entry(12, 2) == add_op(12, 2).body


def test_a_roll_over_that_failed_after_naming_its_map_takes_the_name_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = EntryLogger(tmp_path, 8 * 1024)
    body = bytes(3000)
    logger.append(1, [0, 1], {0: body, 1: body})
    real_fsync = os.fsync

    def fsync_fails(fd: int) -> None:
        monkeypatch.setattr(os, "fsync", real_fsync)  # once
        _no_space()

    monkeypatch.setattr(os, "fsync", fsync_fails)
    with pytest.raises(OSError):
        logger.append(1, [2, 3], {2: body, 3: body})  # rolls over: the final fsync fails
    logger.append(2, [0], {0: bytes(100)})  # small: fits in the same log, where the map was
    logger.sync()
    scanned = EntryLogger(tmp_path, 8 * 1024).ledger_map(0)  # as after a crash
    assert 2 in scanned and 1 in scanned
