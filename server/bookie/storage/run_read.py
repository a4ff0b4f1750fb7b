"""Reading a run of one ledger's entries from the entry logs: one index scan, one ``pread`` per
stretch of records that sit back to back in one log, and each stretch decoded and checked in a
few C-level passes (header unpacks, body slices, CRC32Cs, one list comparison) rather than a chain
of Python calls per entry.

A catch-up read of a closed ledger is served this way, a thousand entries per call: per entry,
the Python of the old loop (location tuple, unpack, slice, CRC, compare) was what the bookie
spent reading from the entry logs beyond what it spends serving from its write cache. A stretch
whose bulk check finds anything amiss (a short read, a header that names another entry, a CRC
that does not match) is decoded again entry by entry by :func:`_decode_each`, which finds the
first bad record and reports it as it always did: a damaged entry asked for raises
``CorruptEntryError``, read-ahead stops short of one.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import accumulate, repeat
from operator import add, and_, eq, sub
from typing import cast

import crc32c

from .entry_logger import RECORD_HEADER, RECORD_HEADER_SIZE, CorruptEntryError, EntryLogger
from .indexes import EntryLocationIndex, Locations

_SIZE_FIELD_COUNTS = RECORD_HEADER_SIZE - 4  # a record's size field counts what follows it


class EntryRun:
    """Entries of one ledger read together: ascending ids, their bodies, and the bodies' bytes.
    Iterates as ``(entry id, body)`` pairs.

    A range takes every ``stride``-th id from a run, and the ids it holds fall at evenly spaced
    positions: one after the other for a ledger whose bookies hold every entry, every other one
    for a striped ledger's bookie (E3 Qw2 holds two residues of three, its reader asks for one
    residue at a stride of 3). So a range's bodies are one slice of the run, checked by comparing
    the ids at those positions with the ids wanted; only a run with holes (an entry missing here)
    goes through a table of its ids, made on first use."""

    __slots__ = ("_by_id", "bodies", "consecutive", "ids", "nbytes")

    def __init__(self, ids: list[int], bodies: list[bytes], nbytes: int) -> None:
        self.ids = ids
        self.bodies = bodies
        self.nbytes = nbytes
        self.consecutive = not ids or ids[-1] - ids[0] == len(ids) - 1
        self._by_id: dict[int, bytes] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.ids, self.bodies, strict=True)

    def __contains__(self, entry_id: int) -> bool:
        ids = self.ids
        if self.consecutive:
            return bool(ids) and ids[0] <= entry_id <= ids[-1]
        at = bisect_left(ids, entry_id)
        return at < len(ids) and ids[at] == entry_id

    def by_id(self) -> dict[int, bytes]:
        if self._by_id is None:
            self._by_id = dict(zip(self.ids, self.bodies, strict=True))
        return self._by_id

    def take(
        self, entry_id: int, stride: int, count: int, size: int, max_bytes: int, first: bool
    ) -> list[bytes]:
        """Bodies ``entry_id``, ``entry_id + stride``, ... (``entry_id`` held here) up to
        ``count``, the first the run lacks, or the one that would take an answer of ``size``
        bytes so far past ``max_bytes`` (the answer's ``first`` entry whatever its size): what a
        range read's loop would take entry by entry, in C-level passes."""
        bodies = self._spaced(entry_id, stride, min(count, len(self.ids)))
        # sizes[k]: the answer's bytes with the first k bodies; body k fits if sizes[k + 1] does
        sizes = list(accumulate(map(len, bodies), initial=size))
        fitting = bisect_right(sizes, max_bytes) - 1
        return bodies[: max(fitting, 1 if first else 0)]

    def _spaced(self, entry_id: int, stride: int, count: int) -> list[bytes]:
        """Up to ``count`` bodies ``stride`` ids apart from ``entry_id``, up to the first the run
        lacks."""
        ids = self.ids
        at = entry_id - ids[0] if self.consecutive else bisect_left(ids, entry_id)
        if self.consecutive:
            return self.bodies[at : at + stride * count : stride]
        step = max(1, bisect_left(ids, entry_id + stride, at) - at)  # positions per stride
        picked = ids[at : at + step * count : step]
        # The spaced positions hold the wanted ids, and either all of them or every one the run
        # can hold (a hole shifts the positions after it: the slice may end short of a held id).
        if picked == list(range(entry_id, entry_id + stride * len(picked), stride)) and (
            len(picked) == count or entry_id + stride * len(picked) > ids[-1]
        ):
            return self.bodies[at : at + step * count : step]
        found = list(map(self.by_id().get, range(entry_id, entry_id + stride * count, stride)))
        if None in found:
            del found[found.index(None) :]
        return cast(list[bytes], found)  # the Nones are cut off


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
    what is left of ``max_bytes``."""
    locs = locations.following_columns(ledger_id, first, max_entries)
    count = len(locs.entry_ids)
    ids: list[int] = []
    bodies: list[bytes] = []
    if not count:
        return EntryRun(ids, bodies, 0)
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
        got = _decode_all(data, start, ledger_id, locs, i, j)
        if got is None:
            got = _decode_each(data, start, ledger_id, locs, i, j, first_wanted=not ids)
        ids += locs.entry_ids[i : i + len(got)]
        bodies += got
        total += sum(locs.lengths[i : i + len(got)])
        if len(got) < j - i:
            break  # read-ahead stops short of a damaged entry
        i = j
    return EntryRun(ids, bodies, total)


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


def _decode_all(
    data: bytes, start: int, ledger_id: int, locs: Locations, i: int, j: int
) -> list[bytes] | None:
    """The bodies of records ``i..j-1``, read as ``data`` from offset ``start``, if every one
    checks out (its header names it, its CRC32C matches); None if any does not."""
    offsets = locs.offsets[i:j]
    lengths = locs.lengths[i:j]
    if len(data) != offsets[-1] + RECORD_HEADER_SIZE + lengths[-1] - start:
        return None
    at = list(map(sub, offsets, repeat(start - RECORD_HEADER_SIZE)))  # where each body starts
    bodies = list(map(data.__getitem__, map(slice, at, map(add, at, lengths))))
    headers = list(map(RECORD_HEADER.unpack_from, repeat(data), map(sub, offsets, repeat(start))))
    expected = list(
        zip(
            map(add, lengths, repeat(_SIZE_FIELD_COUNTS)),
            repeat(ledger_id),
            locs.entry_ids[i:j],
            map(crc32c.crc32c, bodies),
            strict=False,
        )
    )
    return bodies if headers == expected else None


def _decode_each(
    data: bytes, start: int, ledger_id: int, locs: Locations, i: int, j: int, *, first_wanted: bool
) -> list[bytes]:
    """Records ``i..j-1`` one by one, up to the first that does not check out: that one raises
    ``CorruptEntryError`` if it is the first entry of the run (``first_wanted``), which was asked
    for; otherwise the run stops short of it."""
    out: list[bytes] = []
    for k in range(i, j):
        try:
            at = locs.offsets[k] - start
            body = EntryLogger.decode(data, at, ledger_id, locs.entry_ids[k], locs.lengths[k])
        except CorruptEntryError:
            if first_wanted and not out:
                raise
            break
        out.append(body)
    return out
