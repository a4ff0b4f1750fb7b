from __future__ import annotations

import pytest

from bkproto import errors
from bkproto.entry_format import HEADER, parse_header
from bkproto.v1 import bookie_pb2


def test_for_code_returns_registered_class() -> None:
    err = errors.BKError.for_code(-101)
    assert isinstance(err, errors.LedgerFencedError)
    assert err.code == -101
    assert not err.retriable


def test_unknown_code_is_unexpected_condition() -> None:
    assert isinstance(errors.BKError.for_code(12345), errors.UnexpectedConditionError)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (bookie_pb2.ENOLEDGER, errors.NoSuchLedgerError),
        (bookie_pb2.ENOENTRY, errors.NoSuchEntryError),
        (bookie_pb2.EFENCED, errors.LedgerFencedError),
        (bookie_pb2.EUA, errors.UnauthorizedAccessError),
        (bookie_pb2.ETOOMANYREQUESTS, errors.TooManyRequestsError),
        (bookie_pb2.EREADONLY, errors.ReadOnlyBookieError),
    ],
)
def test_status_maps_to_error(status: int, cls: type[errors.BKError]) -> None:
    err = errors.error_for_status(status, "ledger 7")
    assert type(err) is cls
    assert "ledger 7" in str(err)


def test_status_numbers_are_bookkeepers() -> None:
    assert bookie_pb2.ENOLEDGER == 402 and bookie_pb2.EUNKNOWNLEDGERSTATE == 507
    assert bookie_pb2.EFENCED == 504 and bookie_pb2.ETOOMANYREQUESTS == 506


def test_parse_header_round_trip_and_short_body() -> None:
    body = HEADER.pack(5, 9, 8, 1024) + b"x"
    h = parse_header(body)
    assert (h.ledger_id, h.entry_id, h.last_add_confirmed, h.length) == (5, 9, 8, 1024)
    with pytest.raises(ValueError, match="shorter than its 32-byte header"):
        parse_header(b"\x00" * 31)
