"""The usual add-stream answer, every add of one ledger EOK in entry-id order, built per batch.

``results.add(ledger_id=..., entry_id=...)`` per add was the largest per-entry step of a bookie's
answer: a protobuf call with keyword arguments and a new message per add. An all-EOK answer of
consecutive entries is a run of near-identical elements instead (``AddResponse`` with only its
ledger and entry ids set), so it is built as bytes in C-level passes and merged into the
response in one parse: the same message, field for field.
"""

from __future__ import annotations

from itertools import repeat
from typing import Literal

from bkproto.v1 import bookie_pb2

_RESULT_TAG = b"\x0a"  # AddEntriesResponse.results: field 1, length-delimited
_LEDGER_ID_TAG = b"\x10"  # AddResponse.ledger_id: field 2, varint
_ENTRY_ID_TAG = b"\x18"  # AddResponse.entry_id: field 3, varint
_LOW_BITS = 0x7F  # a varint's first byte carries these bits of the value
_LITTLE: Literal["little"] = "little"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > _LOW_BITS:
        out.append(value & _LOW_BITS | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def append_all_ok(
    response: bookie_pb2.AddEntriesResponse, ledger_id: int, first_entry: int, count: int
) -> None:
    """Append ``count`` EOK results for entries ``first_entry``... of ``ledger_id`` (both >= 0).

    Within a run of entry ids that differ only in their lowest 7 bits, each id's varint is the
    run's first varint read as a little-endian integer plus the id's offset in the run (only its
    first byte moves, and it does not carry), so each run's elements come from one ``map``."""
    ids_after = _LEDGER_ID_TAG + _varint(ledger_id) + _ENTRY_ID_TAG
    pieces: list[bytes] = []
    entry_id = first_entry
    end = first_entry + count
    while entry_id < end:
        run_end = min(end, (entry_id | _LOW_BITS) + 1)
        first = _varint(entry_id)
        size = len(first)
        head = _RESULT_TAG + bytes([len(ids_after) + size]) + ids_after
        start = int.from_bytes(first, _LITTLE)
        varints = map(int.to_bytes, range(start, start + run_end - entry_id), repeat(size), repeat(_LITTLE))
        pieces.append(head)
        pieces.append(head.join(varints))
        entry_id = run_end
    response.MergeFromString(b"".join(pieces))
