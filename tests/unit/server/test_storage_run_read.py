"""The bulk entry-log run (``bookie.storage.run_read``) returns exactly what reading the same
run entry by entry returns, wherever the records sit (back to back, split by other ledgers'
records, across logs), whatever the limits, and a damaged record is refused as before: raised
when it is the entry asked for, the end of the run when it comes later."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.support.entry_runs import read_run_one_by_one, run_of, take_one_by_one

from bookie.storage.entry_logger import LOCATION, RECORD_HEADER_SIZE, CorruptEntryError, EntryLogger, log_name
from bookie.storage.indexes import EntryLocationIndex
from bookie.storage.kv import MemoryKeyValueStorage
from bookie.storage.run_read import read_entry_run

T = TypeVar("T")
LEDGER = 5
OTHER = 6

# chunks appended in turn: (ledger, how many entries); the ledger's ids go up by 1 or skip
chunks = st.lists(st.tuples(st.sampled_from([LEDGER, OTHER]), st.integers(1, 12)), min_size=1, max_size=8)


def _fill(directory: Path, plan: list[tuple[int, int]], sizes: list[int], skip: int, log_limit: int) -> tuple[
    EntryLogger, EntryLocationIndex, list[bytes]
]:
    logger = EntryLogger(directory, log_limit)
    index = EntryLocationIndex(MemoryKeyValueStorage())
    next_id = {LEDGER: 0, OTHER: 0}
    locations: list[bytes] = []
    for n, (ledger, count) in enumerate(plan):
        step = skip if ledger == LEDGER else 1
        ids = [next_id[ledger] + step * k for k in range(count)]
        next_id[ledger] = ids[-1] + step
        bodies = {e: os.urandom(sizes[(n + e) % len(sizes)]) for e in ids}
        keys, locs = logger.append(ledger, ids, bodies)
        index.add_batch(keys, locs)
        if ledger == LEDGER:
            locations += locs
    logger.sync()
    return logger, index, locations


def _damage(logger: EntryLogger, location: bytes, where: int) -> None:
    """Flip one byte of a record: in its header (``where`` < 24) or its body."""
    log_id, offset, length = LOCATION.unpack(location)
    at = offset + min(where, RECORD_HEADER_SIZE + length - 1)
    with open(logger.directory / log_name(log_id), "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x5A]))


def _outcome(read: Callable[[], Iterable[T]]) -> list[T] | str:
    try:
        return list(read())
    except CorruptEntryError:
        return "corrupt"


@settings(max_examples=150, deadline=None)
@given(
    plan=chunks,
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4),
    skip=st.sampled_from([1, 1, 2, 3]),
    log_limit=st.sampled_from([1 << 30, 3000, 1500]),
    first_at=st.integers(0, 200),
    max_entries=st.integers(1, 60),
    max_bytes=st.integers(1, 5000),
    damaged=st.none() | st.tuples(st.integers(0, 200), st.integers(0, 400)),
)
def test_bulk_run_equals_the_run_read_entry_by_entry(
    plan: list[tuple[int, int]],
    sizes: list[int],
    skip: int,
    log_limit: int,
    first_at: int,
    max_entries: int,
    max_bytes: int,
    damaged: tuple[int, int] | None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logger, index, locations = _fill(Path(tmp), plan, sizes, skip, log_limit)
        try:
            if damaged is not None and locations:
                _damage(logger, locations[damaged[0] % len(locations)], damaged[1])
            first = first_at % (skip * max(1, len(locations)) + 2)  # now and then one not held
            args = (index, logger, LEDGER, first, max_entries, max_bytes)
            expected = _outcome(lambda: read_run_one_by_one(*args))
            got = _outcome(lambda: read_entry_run(*args))
            assert got == expected
            if isinstance(got, list) and got:
                # a range taking the whole run, entries ``skip`` apart, gets the same bodies
                run = read_entry_run(index, logger, LEDGER, first, max_entries, max_bytes)
                assert run.take(got[0][0], skip, len(run), 0, 1 << 40, True) == [b for _, b in got]
        finally:
            logger.close()


def test_a_damaged_entry_asked_for_is_refused_and_read_ahead_stops_before_one(tmp_path: Path) -> None:
    logger, index, locations = _fill(tmp_path, [(LEDGER, 10)], [100], 1, 1 << 30)
    _damage(logger, locations[4], RECORD_HEADER_SIZE + 10)  # entry 4's body
    assert [e for e, _ in read_entry_run(index, logger, LEDGER, 0, 10, 1 << 20)] == [0, 1, 2, 3]
    run = read_entry_run(index, logger, LEDGER, 0, 10, 1 << 20)
    assert len(run.take(0, 1, 10, 0, 1 << 20, True)) == 4
    assert len(run.take(1, 3, 10, 0, 1 << 20, True)) == 1  # 1, then 4 is damaged
    assert run.take(4, 1, 10, 100, 1 << 20, False) == []  # later in an answer: it ends before it
    assert len(run.take(5, 1, 10, 0, 1 << 20, True)) == 5
    with pytest.raises(CorruptEntryError, match="checksum"):
        run.take(4, 1, 10, 0, 1 << 20, True)
    with pytest.raises(CorruptEntryError, match="checksum"):
        list(read_entry_run(index, logger, LEDGER, 4, 10, 1 << 20))
    assert [e for e, _ in read_entry_run(index, logger, LEDGER, 5, 10, 1 << 20)] == [5, 6, 7, 8, 9]
    logger.close()


def test_a_short_read_ends_the_run_and_is_refused_as_the_entry_asked_for(tmp_path: Path) -> None:
    logger, index, locations = _fill(tmp_path, [(LEDGER, 10)], [100], 1, 1 << 30)
    log_id, offset, _ = LOCATION.unpack(locations[6])
    os.truncate(logger.directory / log_name(log_id), offset + RECORD_HEADER_SIZE + 50)  # inside entry 6
    assert [e for e, _ in read_entry_run(index, logger, LEDGER, 2, 10, 1 << 20)] == [2, 3, 4, 5]
    assert read_entry_run(index, logger, LEDGER, 2, 10, 1 << 20).ids == [2, 3, 4, 5]
    with pytest.raises(CorruptEntryError, match="short read"):
        read_entry_run(index, logger, LEDGER, 6, 10, 1 << 20)
    logger.close()


holes = st.sets(st.integers(0, 9))


def _striped_run(start: int, count: int, residue: int, holes: set[int]) -> dict[int, int]:
    """A striped ledger's bookie (E3 Qw2) holds two residues of three; now and then a hole."""
    return {e: 7 + e % 5 for e in range(start, start + count) if e % 3 != residue and e - start not in holes}


@settings(max_examples=400, deadline=None)
@given(
    held=st.one_of(
        st.dictionaries(st.integers(0, 60), st.integers(0, 50), min_size=1, max_size=40),  # ids with gaps
        st.tuples(st.integers(0, 30), st.lists(st.integers(0, 50), min_size=1, max_size=40)).map(
            lambda run: {run[0] + k: n for k, n in enumerate(run[1])}  # ids one after the other
        ),
        st.builds(_striped_run, st.integers(0, 30), st.integers(1, 40), st.integers(0, 2), holes),
    ).filter(bool),
    start_at=st.integers(0, 60),
    stride=st.integers(1, 4),
    count=st.integers(1, 30),
    size=st.integers(0, 100),
    max_bytes=st.integers(1, 2000),
    first=st.booleans(),
    damaged_at=st.none() | st.integers(0, 60),
)
# A hole shifts the spaced positions after it, and the slice ends one id short of the run's end.
@example(
    held=_striped_run(7, 10, 0, {7}), start_at=0, stride=3, count=4, size=0, max_bytes=34, first=False,
    damaged_at=None,
)  # fmt: skip
def test_a_range_takes_from_a_run_what_it_took_entry_by_entry(
    held: dict[int, int],
    start_at: int,
    stride: int,
    count: int,
    size: int,
    max_bytes: int,
    first: bool,
    damaged_at: int | None,
) -> None:
    bodies = {e: bytes([e % 256]) * n for e, n in held.items()}
    ids = sorted(bodies)
    entry_id = ids[start_at % len(ids)] + start_at % 2 if ids else start_at  # held, or the one after
    damaged = None if damaged_at is None else ids[damaged_at % len(ids)]
    run = run_of(LEDGER, bodies, damaged)
    assert (entry_id in run) == (entry_id in bodies)
    # entry by entry, a damaged entry was refused: raised if asked for first, else the end
    good = {e: b for e, b in bodies.items() if e != damaged}
    expected: list[bytes] | str = take_one_by_one(good, entry_id, stride, count, size, max_bytes, first)
    if first and entry_id == damaged:
        expected = "corrupt"
    held_here = entry_id in run
    got = _outcome(lambda: run.take(entry_id, stride, count, size, max_bytes, first) if held_here else [])
    assert got == expected
