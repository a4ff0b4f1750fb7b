"""``rebuild-db-ledgers-index`` over a real bookie's files: a lost ledger index comes back from the
entry logs and journals with every ledger fenced, keys recovered from journal records where
there are some, and a ledger left without a key takes the first key a client presents, once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.support.storage_helpers import KEY, OTHER_KEY, add_all, add_op, body, make_bookie, make_config

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError
from bookie.storage.indexes import LedgerRecord
from bookie.storage.journal_format import (
    FILE_HEADER_SIZE,
    entry_record_header,
    file_header,
    file_name,
    master_key_record,
)
from bookie.storage.ledger_directory import LedgerDirectory, LostIndexError
from bookie.storage.rebuild_ledgers import rebuild_ledgers

ENTRIES = 5
FENCED_NO_KEY = LedgerRecord(b"", fenced=True)  # what a rebuild records without a journal's key


def _lose_ledger_index(config_dir: Path) -> None:
    shutil.rmtree(config_dir / "current" / "ledgers")


def _records(directory: Path) -> dict[int, LedgerRecord | None]:
    opened = LedgerDirectory(directory, entry_log_size_limit=1 << 30)
    try:
        return {ledger_id: opened.ledgers.get(ledger_id) for ledger_id in opened.ledgers.ids()}
    finally:
        opened.close()


async def test_a_lost_ledger_index_comes_back_fenced_and_takes_the_first_key_offered(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, journal_max_backups=0)
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(ledger_id, e) for ledger_id in (2, 4) for e in range(ENTRIES)])
    await bookie.close()  # a clean stop: entries in entry logs, no journal file left behind
    ledgers_dir = config.ledger_dirs[0]
    journal_files = list((config.journal_dirs[0] / "current").glob("*.txn"))
    for path in journal_files:
        path.unlink()
    _lose_ledger_index(ledgers_dir)
    with pytest.raises(LostIndexError):  # the bookie refuses, rather than losing the ledgers
        LedgerDirectory(ledgers_dir, entry_log_size_limit=1 << 30)

    report = rebuild_ledgers(ledgers_dir, config.journal_dirs, 0, 1)
    assert (report.ledgers, report.keys_found, report.unreadable) == (2, 0, [])
    assert report.backup is None  # there was no old index to keep
    assert _records(ledgers_dir) == {2: FENCED_NO_KEY, 4: FENCED_NO_KEY}

    bookie = make_bookie(config)
    await bookie.start()
    try:
        assert await bookie.read_entry(2, ENTRIES - 1) == body(2, ENTRIES - 1)
        # fenced: a plain add is refused, whatever the key; the key is taken all the same
        assert (await bookie.add_entries([add_op(2, ENTRIES)]))[0].status == bookie_pb2.EFENCED
        await add_all(bookie, [add_op(2, ENTRIES, recovery=True)])
        with pytest.raises(BookieError) as refused:
            await bookie.fence(2, OTHER_KEY)
        assert refused.value.status == bookie_pb2.EUA
        await bookie.fence(4, OTHER_KEY)  # the other ledger takes its own first key
        assert (await bookie.add_entries([add_op(4, ENTRIES, recovery=True)]))[0].status == bookie_pb2.EUA
    finally:
        await bookie.close()

    bookie = make_bookie(config)  # the keys taken survive a restart
    await bookie.start()
    try:
        refused_add = await bookie.add_entries([add_op(2, ENTRIES + 1, key=OTHER_KEY, recovery=True)])
        assert refused_add[0].status == bookie_pb2.EUA
        await add_all(bookie, [add_op(4, ENTRIES, key=OTHER_KEY, recovery=True)])
    finally:
        await bookie.close()


def _journal_file(directory: Path, journal_id: int, records: list[bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = file_header(journal_id) + b"".join(records)
    assert len(file_header(journal_id)) == FILE_HEADER_SIZE
    (directory / file_name(journal_id)).write_bytes(data + bytes(4096))  # zero-filled tail


def _entry(ledger_id: int, entry_id: int) -> bytes:
    entry = body(ledger_id, entry_id)
    return entry_record_header(entry) + entry


async def test_journals_add_their_ledgers_and_keys_for_this_directory_only(tmp_path: Path) -> None:
    config = make_config(tmp_path, ledger_dirs=[tmp_path / "l0", tmp_path / "l1"])
    bookie = make_bookie(config)
    await bookie.start()
    await add_all(bookie, [add_op(ledger_id, 0) for ledger_id in (2, 3)])  # 2 -> l0, 3 -> l1
    await bookie.close()
    journal = tmp_path / "j2"
    _journal_file(journal / "current", 7, [
        master_key_record(2, OTHER_KEY), master_key_record(2, KEY),  # the last one counts
        _entry(6, 0),  # only in the journal, and even: l0's
        master_key_record(9, OTHER_KEY), _entry(9, 0),  # odd: l1's
    ])  # fmt: skip

    report = rebuild_ledgers(config.ledger_dirs[0], [config.journal_dirs[0], journal], 0, 2)
    assert (report.ledgers, report.keys_found) == (2, 1) and report.journals_scanned >= 1
    assert report.backup is not None and Path(report.backup).is_dir()  # noqa: ASYNC240 - the old index, kept
    assert _records(config.ledger_dirs[0]) == {2: LedgerRecord(KEY, fenced=True), 6: FENCED_NO_KEY}

    report = rebuild_ledgers(config.ledger_dirs[1], [journal], 1, 2)
    assert _records(config.ledger_dirs[1]) == {3: FENCED_NO_KEY, 9: LedgerRecord(OTHER_KEY, fenced=True)}


def test_a_damaged_journal_is_reported_and_what_precedes_the_damage_counts(tmp_path: Path) -> None:
    root = tmp_path / "l0"
    LedgerDirectory(root, entry_log_size_limit=1 << 30).close()
    journal = tmp_path / "j"
    _journal_file(journal / "current", 1, [_entry(4, 0), b"\x00\x00\x00\x05garbage!!", _entry(8, 0)])
    report = rebuild_ledgers(root, [journal], 0, 1)
    assert [p for p in report.unreadable if "damaged record" in p], report.unreadable
    assert set(_records(root)) == {4}


def test_the_directory_must_be_one_of_the_configured_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such ledger directory"):
        rebuild_ledgers(tmp_path, [], 2, 2)


def _set_record(config_dir: Path, ledger_id: int, record: LedgerRecord) -> None:
    opened = LedgerDirectory(config_dir, entry_log_size_limit=1 << 30)
    try:
        opened.ledgers.put(ledger_id, record)
    finally:
        opened.close()


async def test_a_key_taken_after_a_rebuild_is_replayed_from_the_journal(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with make_bookie(config) as bookie:
        await add_all(bookie, [add_op(2, 0)])
    _set_record(config.ledger_dirs[0], 2, FENCED_NO_KEY)  # as rebuilt without a key
    bookie = make_bookie(config)
    await bookie.start()
    await bookie.fence(2, KEY)  # takes KEY: in the index, not yet synced, and in the journal
    bookie.abandon()
    _set_record(config.ledger_dirs[0], 2, FENCED_NO_KEY)  # the index write lost
    async with make_bookie(config) as reopened:
        with pytest.raises(BookieError) as refused:
            await reopened.fence(2, OTHER_KEY)
        assert refused.value.status == bookie_pb2.EUA
        await reopened.fence(2, KEY)
