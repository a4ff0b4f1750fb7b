"""A bookie with several journal dirs (``journalDirectories=/j0,/j1``), as BookKeeper runs one journal
per dir: each ledger's records go to journal ``ledger_id % dirs``, each journal has its own
LastLogMark (``lastMark.<index>`` in every ledger dir), and a restart replays every journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.storage_helpers import KEY, add_all, add_op, body, lac_body, make_bookie, make_config

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bookie.storage.config import StorageConfig
from bookie.storage.journal_format import FILE_HEADER_SIZE, LEDGER_ID, RecordType, scan_records


def _config(tmp_path: Path, **overrides: Any) -> StorageConfig:
    return make_config(tmp_path, journal_dirs=[tmp_path / "j0", tmp_path / "j1"], **overrides)


def _ledgers_in_journal(journal_dir: Path) -> set[int]:
    """Ledger ids of every record in the journal files of ``journal_dir``."""
    found: set[int] = set()
    for path in sorted((journal_dir / "current").glob("*.txn")):
        for rtype, payload, _ in scan_records(path.read_bytes(), FILE_HEADER_SIZE):
            if rtype is RecordType.ENTRY:
                found.add(HEADER.unpack_from(payload)[0])
            else:
                found.add(LEDGER_ID.unpack_from(payload)[0])
    return found


async def test_each_ledger_journals_in_its_own_dir_and_all_come_back_after_a_crash(tmp_path: Path) -> None:
    config = _config(tmp_path)
    bookie = make_bookie(config)
    await bookie.start()
    # one message mixing the ledgers of both journals, as a client's stream message does
    await add_all(bookie, [add_op(ledger, e, e - 1) for e in range(50) for ledger in (1, 2, 3, 4)])
    await bookie.fence(3, KEY)
    await bookie.write_lac(2, 40, KEY, lac_body(2, 40))
    await bookie.force_ledger(1)
    bookie.abandon()  # no flush, no checkpoint: only the journals have the data

    assert _ledgers_in_journal(tmp_path / "j0") == {2, 4}
    assert _ledgers_in_journal(tmp_path / "j1") == {1, 3}

    async with make_bookie(config) as reopened:
        assert reopened.storage.replayed_records >= 4 * 50 + 4  # entries, keys, fence, LAC
        for ledger in (1, 2, 3, 4):
            assert [await reopened.read_entry(ledger, e) for e in range(50)] == [
                body(ledger, e, e - 1) for e in range(50)
            ]
        assert (await reopened.read_lac(2)).explicit_lac_body == lac_body(2, 40)
        fenced = await reopened.add_entries([add_op(3, 50, 49)])
        assert fenced[0].status == bookie_pb2.EFENCED
        open_ledger = await reopened.add_entries([add_op(1, 50, 49)])
        assert open_ledger[0].status == bookie_pb2.EOK


async def test_checkpoint_keeps_one_mark_per_journal(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(ledger, e) for e in range(20) for ledger in (5, 6)])
        await bookie.storage.checkpoint()
        marks = bookie.last_log_marks()
        assert [m.journal_dir for m in marks] == [tmp_path / "j0", tmp_path / "j1"]
        assert [m.mark for m in marks] == [j.written_mark for j in bookie.storage.journals]
        assert all(m.mark.offset > FILE_HEADER_SIZE for m in marks)
    ledger_dir = tmp_path / "ledgers"
    assert (ledger_dir / "lastMark.0").exists() and (ledger_dir / "lastMark.1").exists()
    assert not (ledger_dir / "lastMark").exists()  # BookKeeper's name for a single journal only

    async with make_bookie(config) as reopened:
        assert reopened.storage.replayed_records == 0
        assert await reopened.read_entry(6, 19) == body(6, 19)


async def test_replay_that_overflows_the_write_cache_checkpoints_each_journal_correctly(
    tmp_path: Path,
) -> None:
    # Written with a cache that holds it all (no flush yet), replayed with a 1 MiB one: the ~2.4 MB
    # replay flushes several halves, each checkpointing the journal being replayed at that record
    # while the other journal keeps its own mark.
    payload = b"r" * 3000
    bookie = make_bookie(_config(tmp_path, write_cache_max_size_mb=8))
    await bookie.start()
    for start in range(0, 400, 50):
        await add_all(bookie, [add_op(ledger, e, payload=payload) for e in range(start, start + 50)
                               for ledger in (7, 8)])
    bookie.abandon()

    config = _config(tmp_path, write_cache_max_size_mb=1)
    reopened = make_bookie(config)
    await reopened.start()
    assert reopened.storage.replayed_records >= 800
    reopened.abandon()  # crash again right after replay: the mid-replay marks must not skip data

    async with make_bookie(config) as again:
        for ledger in (7, 8):
            assert await again.read_entry(ledger, 0) == body(ledger, 0, payload=payload)
            assert await again.read_entry(ledger, 399) == body(ledger, 399, payload=payload)
            assert await again.list_entries(ledger) == [(0, 399)]
