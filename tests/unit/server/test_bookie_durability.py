"""Bookie core over real files and real fsync: replay after a crash, checkpoints, damaged journals.

The tests taking ``host`` run over both storages (see ``conftest.host``): what a restart keeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.storage_helpers import (
    KEY,
    BookieHost,
    add_all,
    add_op,
    body,
    lac_body,
    make_bookie,
    make_config,
)

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError
from bookie.storage.journal_format import FILE_HEADER_SIZE, file_name


def _journal_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "journal" / "current").glob("*.txn"))


async def test_crash_then_replay_returns_every_acknowledged_entry(host: BookieHost) -> None:
    bookie = host.bookie()
    await bookie.start()
    for start in range(0, 300, 50):
        await add_all(bookie, [add_op(1, e, e - 1) for e in range(start, start + 50)])
    await add_all(bookie, [add_op(2, 0)])
    bookie.abandon()  # no flush, no checkpoint: everything must come back from the journal

    reopened = host.bookie()
    async with reopened:
        assert reopened.storage.replayed_records >= 301
        for e in range(300):
            assert await reopened.read_entry(1, e) == body(1, e, e - 1)
        assert await reopened.read_entry(2, 0) == body(2, 0)
        assert reopened.last_add_confirmed(1) == 298
        assert await reopened.read_entry(1, -1) == body(1, 299, 298)


async def test_clean_close_then_reopen_replays_nothing(host: BookieHost) -> None:
    async with host.bookie() as bookie:
        await add_all(bookie, [add_op(5, e) for e in range(100)])
        await bookie.fence(5, KEY)
    async with host.bookie() as reopened:
        assert reopened.storage.replayed_records == 0
        assert [await reopened.read_entry(5, e) for e in range(100)] == [body(5, e) for e in range(100)]
        assert await reopened.list_entries(5) == [(0, 99)]


@pytest.mark.parametrize("crash", [False, True])
async def test_fence_master_key_and_explicit_lac_persist(host: BookieHost, crash: bool) -> None:
    bookie = host.bookie()
    await bookie.start()
    await add_all(bookie, [add_op(9, 0), add_op(9, 1, 0)])
    await bookie.write_lac(9, 1, KEY, lac_body(9, 1))
    await bookie.fence(9, KEY)
    await bookie.fence(10, KEY)  # unknown ledger: fencing records the key too
    if crash:
        bookie.abandon()
    else:
        await bookie.close()

    async with host.bookie() as reopened:
        assert reopened.last_add_confirmed(9) == 1
        info = await reopened.read_lac(9)
        assert info.explicit_lac_body == lac_body(9, 1)
        assert info.last_entry_body == body(9, 1, 0)
        result = await reopened.add_entries([add_op(9, 2, 1)])
        assert result[0].status == bookie_pb2.EFENCED
        result = await reopened.add_entries([add_op(9, 2, 1, recovery=True)])
        assert result[0].status == bookie_pb2.EOK
        result = await reopened.add_entries([add_op(10, 0, key=bytes(20))])
        assert result[0].status == bookie_pb2.EUA
        with pytest.raises(BookieError) as err:
            await reopened.fence(9, bytes(20))
        assert err.value.status == bookie_pb2.EUA


async def test_torn_journal_tail_is_cut_and_not_served(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(3, e) for e in range(10)])
    await add_all(bookie, [add_op(3, 10)])
    journal = bookie.storage.journals[0].written_mark
    bookie.abandon()
    # tear the last record (entry 10) in the middle
    path = tmp_path / "journal" / "current" / file_name(journal.journal_id)
    with path.open("r+b") as f:
        f.truncate(journal.offset - 100)

    async with make_bookie(config) as reopened:
        assert [await reopened.read_entry(3, e) for e in range(10)] == [body(3, e) for e in range(10)]
        with pytest.raises(BookieError) as err:
            await reopened.read_entry(3, 10)
        assert err.value.status == bookie_pb2.ENOENTRY


async def test_flipped_byte_in_journal_record_is_not_served(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(4, 0)])
    first_end = bookie.storage.journals[0].written_mark
    await add_all(bookie, [add_op(4, 1)])
    bookie.abandon()
    path = tmp_path / "journal" / "current" / file_name(first_end.journal_id)
    data = bytearray(path.read_bytes())
    data[first_end.offset + 9 + 40] ^= 0xFF  # inside entry 1's body
    path.write_bytes(bytes(data))

    async with make_bookie(config) as reopened:
        assert await reopened.read_entry(4, 0) == body(4, 0)
        with pytest.raises(BookieError) as err:
            await reopened.read_entry(4, 1)
        assert err.value.status == bookie_pb2.ENOENTRY


async def test_checkpoint_advances_mark_and_removes_old_journals(tmp_path: Path) -> None:
    config = make_config(tmp_path, journal_max_size_mb=1, journal_max_backups=1)
    async with make_bookie(config) as bookie:
        payload = b"p" * 8000
        for start in range(0, 400, 40):  # ~3.2 MB: rolls the 1 MB journal a few times
            await add_all(bookie, [add_op(6, e, payload=payload) for e in range(start, start + 40)])
        assert len(_journal_files(tmp_path)) >= 4
        await bookie.storage.checkpoint()
        mark = bookie.last_log_marks()[0].mark
        assert mark == bookie.storage.journals[0].written_mark
        ids = [int(p.stem, 16) for p in _journal_files(tmp_path)]
        assert len([i for i in ids if i < mark.journal_id]) == 1  # one backup kept
        assert (tmp_path / "ledgers" / "lastMark").exists()
        assert mark.offset > FILE_HEADER_SIZE


async def test_entry_log_rolls_and_old_logs_keep_their_ledger_map(tmp_path: Path) -> None:
    config = make_config(tmp_path, entry_log_size_limit=64 * 1024)
    async with make_bookie(config) as bookie:
        payload = b"q" * 4000
        await add_all(bookie, [add_op(7, e, payload=payload) for e in range(40)])
        await add_all(bookie, [add_op(8, e, payload=payload) for e in range(10)])
        await bookie.storage.checkpoint()
        logger = bookie.storage.dirs[0].entry_logger
        logs = sorted((tmp_path / "ledgers" / "current").glob("*.log"))
        assert len(logs) >= 3
        first_map = logger.read_ledger_map(int(logs[0].stem, 16))
        assert first_map is not None and set(first_map) == {7}
        assert first_map[7] <= 64 * 1024
        assert bookie.storage.write_cache.size == 0  # reads below come from the entry logs
        expected = [body(7, e, payload=payload) for e in range(40)]
        assert [await bookie.read_entry(7, e) for e in range(40)] == expected
        assert await bookie.read_entry(8, 9) == body(8, 9, payload=payload)


async def test_several_ledger_dirs_survive_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path, ledger_dirs=[tmp_path / "l1", tmp_path / "l2"])
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(led, e) for led in (20, 21) for e in range(5)])
    assert (tmp_path / "l1" / "lastMark").exists() and (tmp_path / "l2" / "lastMark").exists()
    async with make_bookie(config) as reopened:
        for led in (20, 21):
            assert [await reopened.read_entry(led, e) for e in range(5)] == [body(led, e) for e in range(5)]


async def test_a_crash_during_a_paced_flush_leaves_the_flush_whole(tmp_path: Path) -> None:
    """abandon() (the in-process crash) lets a flush already on its thread finish before it
    closes RocksDB: closed under it, the flush failed half-way through its index writes."""
    config = make_config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(3, e) for e in range(2000)])  # several flush slices
    storage = bookie.storage
    storage._filling_since -= 10.0  # the half took 10 s to fill: the flush is paced over 5 s
    storage._start_flush()
    flush = storage._flush_task
    assert flush is not None
    await asyncio.sleep(0.05)  # on its thread, pausing between slices
    bookie.abandon()
    await flush  # finished without error
    async with make_bookie(config) as reopened:
        assert [await reopened.read_entry(3, e) for e in range(2000)] == [body(3, e) for e in range(2000)]


async def test_a_crash_just_before_a_flush_starts_writes_nothing_after_it(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(4, e) for e in range(300)])
    storage = bookie.storage
    storage._start_flush()  # created, not yet on its thread
    flush = storage._flush_task
    assert flush is not None
    bookie.abandon()
    await asyncio.gather(flush, return_exceptions=True)
    assert storage.health.index_failure is None and storage.health.flush_failure is None
    assert not list((tmp_path / "ledgers" / "current").glob("*.log"))  # no entry log written
    async with make_bookie(config) as reopened:  # everything from the journal
        assert reopened.storage.replayed_records >= 300
        assert [await reopened.read_entry(4, e) for e in range(300)] == [body(4, e) for e in range(300)]
