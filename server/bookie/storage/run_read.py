"""Reading a run of one ledger's entries from the entry logs: one index scan, one ``pread`` per
stretch of records that sit back to back in one log, the records kept as read. A body is sliced
out and checked (its header names it, its CRC32C matches) only when something takes it, in a few
C-level passes (header unpacks, body slices, CRC32Cs, one list comparison) over the entries taken
rather than a chain of Python calls per entry.

A catch-up read of a closed ledger is served this way, a thousand entries per call. Why the
check waits for the take: a striped ledger's bookie (E3 Qw2) holds two residues of three, back
to back in its entry logs, so the run it reads for one residue holds the other too; a reader asks
for that one from the same bookie only now and then. Decoding every record up front paid a
slice, a CRC and later a free for bodies nobody took (docs/performance.md, "Striped catch-up
reads: runs checked when taken").

A take whose bulk check finds anything amiss looks for the first entry that does not check out:
that entry raises ``CorruptEntryError`` when it is the first the caller asked for, and otherwise
the entries before it are returned (a range read answers with those, and the next asks for the
damaged one). A stretch the ``pread`` returned short of ends the run at the first record it cut.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import accumulate, repeat
from operator import add, and_, eq, ne, sub
from typing import TypeVar, cast

import crc32c

from .entry_logger import RECORD_HEADER, RECORD_HEADER_SIZE, EntryLogger
from .indexes import EntryLocationIndex

_SIZE_FIELD_COUNTS = RECORD_HEADER_SIZE - 4  # a record's size field counts what follows it
T = TypeVar("T")
Where = slice | list[int]  # positions in a run: evenly spaced, or listed


class EntryRun:
    """Entries of one ledger read together: ascending ids, each entry's record where it was read,
    and the bodies' bytes. Iterates as ``(entry id, body)`` pairs, up to the first damaged entry.

    A range takes every ``stride``-th id from a run, and the ids it holds fall at evenly spaced
    positions: one after the other for a ledger whose bookies hold every entry, every other one
    for a striped ledger's bookie (E3 Qw2 holds two residues of three, its reader asks for one
    residue at a stride of 3). So a range's entries are one slice of the run, checked by comparing
    the ids at those positions with the ids wanted; only a run with holes (an entry missing here)
    goes through a table of its ids, made on first use."""

    __slots__ = ("_positions", "consecutive", "ids", "ledger_id", "lengths", "nbytes", "records", "starts")

    def __init__(
        self, ledger_id: int, ids: list[int], records: list[bytes], starts: list[int], lengths: list[int]
    ) -> None:
        self.ledger_id = ledger_id
        self.ids = ids
        self.records = records  # records[k]: the bytes read that hold entry ids[k]'s record
        self.starts = starts  # where its body starts in them
        self.lengths = lengths  # its body's length, as the index gives it
        self.nbytes = sum(lengths)
        self.consecutive = not ids or ids[-1] - ids[0] == len(ids) - 1
        self._positions: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.ids, self.bodies(), strict=False)

    def __contains__(self, entry_id: int) -> bool:
        ids = self.ids
        if self.consecutive:
            return bool(ids) and ids[0] <= entry_id <= ids[-1]
        at = bisect_left(ids, entry_id)
        return at < len(ids) and ids[at] == entry_id

    def bodies(self) -> list[bytes]:
        """Every body, up to the first damaged entry (``CorruptEntryError`` if that is the first)."""
        return self._checked(slice(None), True)

    def take(
        self, entry_id: int, stride: int, count: int, size: int, max_bytes: int, first: bool
    ) -> list[bytes]:
        """Bodies ``entry_id``, ``entry_id + stride``, ... (``entry_id`` held here) up to
        ``count``, the first the run lacks, or the one that would take an answer of ``size``
        bytes so far past ``max_bytes`` (the answer's ``first`` entry whatever its size): what a
        range read's loop would take entry by entry, in C-level passes. A damaged entry ends
        them, or raises ``CorruptEntryError`` if it is ``entry_id`` and ``first``."""
        where = self._spaced(entry_id, stride, min(count, len(self.ids)))
        # sizes[k]: the answer's bytes with the first k bodies; body k fits if sizes[k + 1] does
        sizes = list(accumulate(_picked(self.lengths, where), initial=size))
        fitting = max(bisect_right(sizes, max_bytes) - 1, 1 if first else 0)
        if isinstance(where, slice):
            where = slice(where.start, where.start + where.step * fitting, where.step)
        else:
            del where[fitting:]
        return self._checked(where, first)

    def _spaced(self, entry_id: int, stride: int, count: int) -> Where:
        """The positions of up to ``count`` entries ``stride`` ids apart from ``entry_id``, up to
        the first the run lacks."""
        ids = self.ids
        if self.consecutive:
            at = entry_id - ids[0]
            return slice(at, at + stride * count, stride)
        at = bisect_left(ids, entry_id)
        step = max(1, bisect_left(ids, entry_id + stride, at) - at)  # positions per stride
        where = slice(at, at + step * count, step)
        picked = ids[where]
        # The spaced positions hold the wanted ids, and either all of them or every one the run
        # can hold (a hole shifts the positions after it: the slice may end short of a held id).
        if picked == list(range(entry_id, entry_id + stride * len(picked), stride)) and (
            len(picked) == count or entry_id + stride * len(picked) > ids[-1]
        ):
            return where
        if self._positions is None:
            self._positions = {entry: k for k, entry in enumerate(ids)}
        found = list(map(self._positions.get, range(entry_id, entry_id + stride * count, stride)))
        if None in found:
            del found[found.index(None) :]
        return cast(list[int], found)  # the Nones are cut off

    def _checked(self, where: Where, first: bool) -> list[bytes]:
        """The bodies at ``where``, sliced out of their records, up to the first that does not
        check out: that one raises ``CorruptEntryError`` if it is the first and ``first``."""
        records = _picked(self.records, where)
        starts = _picked(self.starts, where)
        lengths = _picked(self.lengths, where)
        ids = _picked(self.ids, where)
        bodies = list(map(bytes.__getitem__, records, map(slice, starts, map(add, starts, lengths))))
        headers = list(map(RECORD_HEADER.unpack_from, records, map(sub, starts, repeat(RECORD_HEADER_SIZE))))
        expected = list(
            zip(
                map(add, lengths, repeat(_SIZE_FIELD_COUNTS)),
                repeat(self.ledger_id),
                ids,
                map(crc32c.crc32c, bodies),
                strict=False,
            )
        )
        if headers == expected:
            return bodies
        bad = list(map(ne, headers, expected)).index(True)
        if bad == 0 and first:
            # raises, saying what is wrong with the record
            EntryLogger.decode(records[0], starts[0] - RECORD_HEADER_SIZE, self.ledger_id, ids[0], lengths[0])
        return bodies[:bad]


def _picked(values: list[T], where: Where) -> list[T]:
    return values[where] if isinstance(where, slice) else list(map(values.__getitem__, where))


def read_entry_run(
    locations: EntryLocationIndex,
    logger: EntryLogger,
    ledger_id: int,
    first: int,
    max_entries: int,
    max_bytes: int,
) -> EntryRun:
    """``first`` and up to ``max_entries - 1`` following entries held here, stopping once the
    bodies reach ``max_bytes`` (at least ``first``); nothing if ``first`` is not indexed. A
    stretch read in one ``pread`` holds records while their bytes, headers included, stay under
    what is left of ``max_bytes``. The records are checked when their bodies are taken, but for
    a short read: a record the stretch cut ends the run, and raises ``CorruptEntryError`` if it
    is ``first``."""
    locs = locations.following_columns(ledger_id, first, max_entries)
    count = len(locs.entry_ids)
    ids: list[int] = []
    records: list[bytes] = []
    starts: list[int] = []
    if not count:
        return EntryRun(ledger_id, ids, records, starts, [])
    record_ends = list(map(add, locs.offsets, map(add, locs.lengths, repeat(RECORD_HEADER_SIZE))))
    # back to back: in the same log, and starting where the record before it ends
    follows = list(map(and_, map(eq, locs.log_ids[1:], locs.log_ids), map(eq, locs.offsets[1:], record_ends)))
    # the records' bytes, headers included, before each one (and after the last)
    spans = list(accumulate(map(sub, record_ends, locs.offsets), initial=0))
    total = 0
    i = 0
    while i < count and (not ids or total < max_bytes):
        stretch_end = _stretch_end(follows, i)
        # records i.. while their bytes stay under the budget left (record i whatever its size)
        j = _within_budget(spans, i, stretch_end, max_bytes - total)
        start = locs.offsets[i]
        data = logger.read_span(locs.log_ids[i], start, record_ends[j - 1] - start)
        # the records read whole: all of them, but for a short read
        read_end = start + len(data)
        whole = j if read_end == record_ends[j - 1] else bisect_right(record_ends, read_end, i, j)
        if whole == i and not ids:
            EntryLogger.decode(data, 0, ledger_id, locs.entry_ids[i], locs.lengths[i])  # raises: short read
        ids += locs.entry_ids[i:whole]
        records += repeat(data, whole - i)
        starts += map(sub, locs.offsets[i:whole], repeat(start - RECORD_HEADER_SIZE))
        total += sum(locs.lengths[i:whole])
        if whole < j:
            break  # the log ends inside the stretch
        i = j
    return EntryRun(ledger_id, ids, records, starts, locs.lengths[: len(ids)])


def _stretch_end(follows: list[bool], i: int) -> int:
    """The end of the stretch of back-to-back records that starts at record ``i``."""
    try:
        return follows.index(False, i) + 1
    except ValueError:
        return len(follows) + 1


def _within_budget(spans: list[int], i: int, end: int, budget: int) -> int:
    """The end of records ``i..end`` (exclusive) to read in one go: record ``j`` joins while
    the bytes of records ``i..j-1`` are below ``budget``; record ``i`` always."""
    # record j joins iff spans[j] - spans[i] < budget: the first j where that fails ends it
    return bisect_left(spans, spans[i] + budget, i + 1, end)
