"""An entry log's append writes the same records and locations whether a flush's chunk fits in
the current log (one pass per field) or rolls over to a new log part-way (record by record)."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c

from bookie.storage.entry_logger import LOCATION, LOG_HEADER_SIZE, RECORD_HEADER_SIZE, EntryLogger, log_name

LEDGER = 7


def _bodies(count: int) -> dict[int, bytes]:
    return {entry_id: os.urandom(100 + 37 * entry_id) for entry_id in range(count)}


def _read_back(logger: EntryLogger, bodies: dict[int, bytes], locations: list[bytes]) -> None:
    for entry_id, raw in zip(sorted(bodies), locations, strict=True):
        log_id, offset, length = LOCATION.unpack(raw)
        data = logger.read_span(log_id, offset, RECORD_HEADER_SIZE + length)
        assert EntryLogger.decode(data, 0, LEDGER, entry_id, length) == bodies[entry_id]


def test_a_chunk_that_rolls_over_writes_what_one_that_fits_writes(tmp_path: Path) -> None:
    bodies = _bodies(10)
    ids = sorted(bodies)
    records = sum(RECORD_HEADER_SIZE + len(body) for body in bodies.values())
    fits = EntryLogger(tmp_path / "fits", LOG_HEADER_SIZE + records)
    rolls = EntryLogger(tmp_path / "rolls", LOG_HEADER_SIZE + records - 1)  # the last record rolls
    fit_keys, fit_locations = fits.append(LEDGER, ids, bodies)
    roll_keys, roll_locations = rolls.append(LEDGER, ids, bodies)
    fits.sync()
    rolls.sync()
    assert fit_keys == roll_keys
    assert fit_locations[:-1] == roll_locations[:-1]
    assert LOCATION.unpack(fit_locations[0])[1] == LOG_HEADER_SIZE
    first_log = LOCATION.unpack(fit_locations[0])[0]
    assert LOCATION.unpack(roll_locations[-1])[0] != first_log  # the last entry went to a new log
    assert fits.read_span(first_log, LOG_HEADER_SIZE, records - RECORD_HEADER_SIZE - len(bodies[9])) == (
        rolls.read_span(first_log, LOG_HEADER_SIZE, records - RECORD_HEADER_SIZE - len(bodies[9]))
    )
    _read_back(fits, bodies, fit_locations)
    _read_back(rolls, bodies, roll_locations)


def test_chunks_that_fit_follow_each_other_in_the_log(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path, 1 << 30)
    first, second = _bodies(5), {entry_id: os.urandom(50) for entry_id in range(5, 9)}
    locations = logger.append(LEDGER, sorted(first), first)[1]
    locations += logger.append(LEDGER, sorted(second), second)[1]
    assert logger.append(LEDGER, [], {}) == ([], [])
    logger.sync()
    _read_back(logger, first | second, locations)


def test_crcs_the_caller_knows_give_the_records_computed_ones_give(tmp_path: Path) -> None:
    bodies = _bodies(10)
    ids = sorted(bodies)
    known = {entry_id: crc32c.crc32c(body) for entry_id, body in bodies.items() if entry_id % 3}
    for name, size_limit in (("fits", 1 << 30), ("rolls", LOG_HEADER_SIZE + 2000)):
        computed = EntryLogger(tmp_path / name / "computed", size_limit)
        given = EntryLogger(tmp_path / name / "given", size_limit)
        assert computed.append(LEDGER, ids, bodies) == given.append(LEDGER, ids, bodies, known)
        computed.sync()
        given.sync()
        for log_id in {computed.current_id, *computed.finished_log_ids()}:
            assert (tmp_path / name / "computed" / log_name(log_id)).read_bytes() == (
                tmp_path / name / "given" / log_name(log_id)
            ).read_bytes()
