"""Running ``pybk bench bookie`` in the test process against a real bookie, and reading back what
it added: the tests of the bench's wires and transports."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from pybk.main import main


@dataclass
class BenchRun:
    exit_code: int
    report: dict[str, Any] | None  # the --json report, when one was printed
    stderr: str


def bench_bookie(capsys: pytest.CaptureFixture[str], *argv: str) -> BenchRun:
    """``pybk bench bookie ARGV --json``, its exit code, report and standard error."""
    capsys.readouterr()
    code = main(["bench", "bookie", *argv, "--json"])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return BenchRun(code, json.loads(lines[-1]) if lines else None, err)


def _channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    return grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)


def stored_entry_ids(
    address: str, ledger_id: int, credentials: grpc.ChannelCredentials | None = None
) -> list[int]:
    """The entry ids the bookie at ``address`` holds of ``ledger_id``."""
    with _channel(address, credentials) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.GetListOfEntriesOfLedger(
            bookie_pb2.GetListOfEntriesOfLedgerRequest(ledger_id=ledger_id), timeout=30
        )
    assert reply.status == bookie_pb2.EOK, reply.message
    return [e for r in reply.ranges for e in range(r.first, r.last + 1)]


def stored_header(
    address: str, ledger_id: int, entry_id: int, credentials: grpc.ChannelCredentials | None = None
) -> tuple[int, int, int, int]:
    """The header of a stored entry: ledger id, entry id, LAC, ledger length."""
    with _channel(address, credentials) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.ReadEntry(
            bookie_pb2.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=30
        )
    assert reply.status == bookie_pb2.EOK, reply.message
    return HEADER.unpack_from(reply.body)  # type: ignore[no-any-return]
