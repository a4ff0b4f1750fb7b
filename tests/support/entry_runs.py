"""The entry-log run read entry by entry, as the bookie read it before its bulk path
(``bookie.storage.run_read``): the reference a property test holds the bulk path to."""

from __future__ import annotations

import crc32c

from bookie.storage.entry_logger import RECORD_HEADER, RECORD_HEADER_SIZE, CorruptEntryError, EntryLogger
from bookie.storage.indexes import EntryLocationIndex
from bookie.storage.run_read import EntryRun


def read_run_one_by_one(
    locations: EntryLocationIndex,
    logger: EntryLogger,
    ledger_id: int,
    first: int,
    max_entries: int,
    max_bytes: int,
) -> list[tuple[int, bytes]]:
    """``first`` and up to ``max_entries - 1`` following entries, one pread per contiguous
    stretch kept under the bytes left, each record decoded on its own; a damaged ``first``
    raises, a damaged later entry ends the run."""
    locs = locations.following(ledger_id, first, max_entries)
    out: list[tuple[int, bytes]] = []
    total = 0
    i = 0
    while i < len(locs) and (not out or total < max_bytes):
        log_id, start = locs[i][1], locs[i][2]
        end = start + RECORD_HEADER_SIZE + locs[i][3]
        j = i + 1
        budget = max_bytes - total
        while j < len(locs) and locs[j][1] == log_id and locs[j][2] == end and end - start < budget:
            end = locs[j][2] + RECORD_HEADER_SIZE + locs[j][3]
            j += 1
        data = logger.read_span(log_id, start, end - start)
        for entry_id, _log, offset, length in locs[i:j]:
            try:
                body = EntryLogger.decode(data, offset - start, ledger_id, entry_id, length)
            except CorruptEntryError:
                if not out:
                    raise
                return out
            out.append((entry_id, body))
            total += length
        i = j
    return out


def run_of(ledger_id: int, bodies: dict[int, bytes], damaged: int | None = None) -> EntryRun:
    """A run holding ``bodies`` (entry id -> body) as entry-log records read in one stretch, in
    id order; the record of entry ``damaged`` with a CRC that does not match its body."""
    ids = sorted(bodies)
    records = [
        RECORD_HEADER.pack(
            len(bodies[e]) + RECORD_HEADER_SIZE - 4, ledger_id, e, crc32c.crc32c(bodies[e]) ^ (e == damaged)
        )
        + bodies[e]
        for e in ids
    ]
    data = b"".join(records)
    starts, at = [], 0
    for record in records:
        starts.append(at + RECORD_HEADER_SIZE)
        at += len(record)
    return EntryRun(ledger_id, ids, [data] * len(ids), starts, [len(bodies[e]) for e in ids])


def take_one_by_one(
    run: dict[int, bytes], entry_id: int, stride: int, count: int, size: int, max_bytes: int, first: bool
) -> list[bytes]:
    """What the range read's loop took from a run entry by entry: up to ``count`` bodies
    ``stride`` apart, up to the first the run lacks or the one that would pass ``max_bytes``
    (``size`` so far; the answer's ``first`` entry whatever its size)."""
    out: list[bytes] = []
    while len(out) < count:
        body = run.get(entry_id)
        if body is None or ((out or not first) and size + len(body) > max_bytes):
            break
        out.append(body)
        size += len(body)
        entry_id += stride
    return out
