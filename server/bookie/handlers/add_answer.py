"""The usual add-stream answer, every add of one ledger EOK in entry-id order, built per batch.

``results.add(ledger_id=..., entry_id=...)`` per add was the largest per-entry step of a bookie's
answer: a protobuf call with keyword arguments and a new message per add. An all-EOK answer of
ascending entries is a run of near-identical elements instead (``AddResponse`` with only its
ledger and entry ids set), so it is built as bytes in C-level passes and merged into the
response in one parse: the same message, field for field.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from operator import and_, or_
from typing import Literal

from bkproto.v1 import bookie_pb2
from bkproto.wire import varint

_RESULT_TAG = b"\x0a"  # AddEntriesResponse.results: field 1, length-delimited
_LEDGER_ID_TAG = b"\x10"  # AddResponse.ledger_id: field 2, varint
_ENTRY_ID_TAG = b"\x18"  # AddResponse.entry_id: field 3, varint
_LOW_BITS = 0x7F  # a varint's first byte carries these bits of the value
_LITTLE: Literal["little"] = "little"


def append_all_ok(response: bookie_pb2.AddEntriesResponse, ledger_id: int, entry_ids: list[int]) -> None:
    """Append an EOK result for each of ``entry_ids`` (ascending, >= 0) of ``ledger_id`` (>= 0).

    Entry ids that differ only in their lowest 7 bits (a run of the list) have varints that
    differ only in their first byte: read as little-endian integers, each is the run's base
    varint (its low bits zero) plus the id's low bits, without carry. So each run's elements
    come from one ``map`` (a client's batch to one bookie is a few runs: consecutive ids, or
    two of every three under striping)."""
    ids_after = _LEDGER_ID_TAG + varint(ledger_id) + _ENTRY_ID_TAG
    pieces: list[bytes] = []
    start = 0
    count = len(entry_ids)
    while start < count:
        high = entry_ids[start] & ~_LOW_BITS
        end = bisect_left(entry_ids, high + _LOW_BITS + 1, start)
        base = varint(high)
        size = len(base)
        head = _RESULT_TAG + bytes([len(ids_after) + size]) + ids_after
        low_bits = map(and_, entry_ids[start:end], repeat(_LOW_BITS))
        values = map(or_, low_bits, repeat(int.from_bytes(base, _LITTLE)))
        pieces.append(head)
        pieces.append(head.join(map(int.to_bytes, values, repeat(size), repeat(_LITTLE))))
        start = end
    response.MergeFromString(b"".join(pieces))
