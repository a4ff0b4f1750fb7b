"""Add requests as a client sends them, for the tests of the bookie's request layer (gRPC service,
add port, the client's add-port connection) over the in-memory ``FakeBookieCore``, which stores
entry bodies as they arrive and checks no digest."""

from __future__ import annotations

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2

MASTER_KEY = b"k" * 20


def fake_entry(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes = b"payload") -> bytes:
    """An entry body: BookKeeper's entry header, a 4-byte placeholder digest, the payload."""
    return HEADER.pack(ledger_id, entry_id, lac, len(payload)) + b"D" * 4 + payload


def add_request(
    ledger_id: int, entry_id: int, lac: int = -1, key: bytes = MASTER_KEY, flags: int = 0
) -> bookie_pb2.AddRequest:
    body = fake_entry(ledger_id, entry_id, lac)
    return bookie_pb2.AddRequest(
        ledger_id=ledger_id, entry_id=entry_id, master_key=key, body=body, flags=flags
    )
