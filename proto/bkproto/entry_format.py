"""The entry layout shared by client and bookie (BookKeeper's v3 digest layout).

On the wire and on disk an entry body is ``header(32) || digest(N) || payload`` where the header is
four big-endian longs: ledger id, entry id, the writer's last-add-confirmed when it sent the entry,
and the cumulative ledger length including this entry. The bookie treats the rest as opaque.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

HEADER = struct.Struct(">qqqq")
HEADER_SIZE = HEADER.size  # 32
MASTER_KEY_SIZE = 20
LAC_HEADER = struct.Struct(">qq")  # explicit LAC body: ledgerId(8) || lac(8) || digest
NO_ENTRY = -1  # BookKeeper's INVALID_ENTRY_ID / "no LAC yet"
LAST_ADD_CONFIRMED = -1  # entry id that asks a bookie for its last entry


class EntryHeader(NamedTuple):
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int


def parse_header(body: bytes) -> EntryHeader:
    """The header of an entry body; ``ValueError`` if the body is shorter than a header."""
    if len(body) < HEADER_SIZE:
        raise ValueError(f"entry body is {len(body)} bytes, shorter than its {HEADER_SIZE}-byte header")
    return EntryHeader._make(HEADER.unpack_from(body))
