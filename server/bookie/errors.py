"""The bookie's own error: a BookKeeper status code plus a message naming what was wrong.

Raised anywhere below the gRPC layer; each request handler turns it into the response's
``status`` and ``message``. Never raised to grpc itself: a bad request must not look like a crash.
"""

from __future__ import annotations

from bkproto.v1 import bookie_pb2


class BookieError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __repr__(self) -> str:
        return f"BookieError({bookie_pb2.StatusCode.Name(self.status)}, {self.message!r})"


def no_ledger(ledger_id: int) -> BookieError:
    return BookieError(bookie_pb2.ENOLEDGER, f"ledger {ledger_id} does not exist on this bookie")


def no_entry(ledger_id: int, entry_id: int) -> BookieError:
    return BookieError(bookie_pb2.ENOENTRY, f"entry {entry_id} of ledger {ledger_id} does not exist")


def bad_request(message: str) -> BookieError:
    return BookieError(bookie_pb2.EBADREQ, message)
