"""A range read over a damaged entry-log record, on a real bookie process: the answer ends just
before the damaged entry, a read that starts at it gets an error (the client then reads that
entry from another replica), and the entries after it are served as before. Striped reads skip
over it: a record is checked when a read takes it, not when its run is read."""

from __future__ import annotations

import os

import grpc
import pytest
from tests.support.bookies import BookieFactory, entry_body

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.storage.entry_logger import LOG_HEADER_SIZE, RECORD_HEADER_SIZE, log_name

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"k" * 20
LEDGER = 10  # 10 % 2 == 0: the first ledger directory
ENTRIES = 60
DAMAGED = 20


def test_a_range_read_stops_before_a_damaged_record_and_reads_on_after_it(
    bookie_factory: BookieFactory,
) -> None:
    bookie = bookie_factory()
    bodies = [entry_body(LEDGER, e, e - 1, os.urandom(300)) for e in range(ENTRIES)]
    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        for entry_id, body in enumerate(bodies):
            add = S.AddRequest(ledger_id=LEDGER, entry_id=entry_id, master_key=KEY, body=body)
            assert stub.AddEntry(add, timeout=30).status == S.EOK
    assert bookie.stop() == 0  # a clean stop flushes every entry into the entry log, in id order
    record = RECORD_HEADER_SIZE + len(bodies[0])
    with open(bookie.ledger_dirs[0] / "current" / log_name(0), "r+b") as log:
        log.seek(LOG_HEADER_SIZE + DAMAGED * record + RECORD_HEADER_SIZE + 40)  # in entry 20's body
        byte = log.read(1)[0]
        log.seek(-1, os.SEEK_CUR)
        log.write(bytes([byte ^ 0xFF]))
    bookie.start()

    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)

        def read(first: int, stride: int = 1) -> S.ReadEntriesResponse:
            request = S.ReadEntriesRequest(
                ledger_id=LEDGER, first_entry_id=first, max_count=ENTRIES, max_bytes=1 << 20, stride=stride
            )
            answer: S.ReadEntriesResponse = stub.ReadEntries(request, timeout=30)
            return answer

        before = read(0)
        assert before.status == S.EOK and list(before.bodies) == bodies[:DAMAGED]
        at = read(DAMAGED)
        assert at.status == S.EIO and "checksum" in at.message
        after = read(DAMAGED + 1)
        assert after.status == S.EOK and list(after.bodies) == bodies[DAMAGED + 1 :]
        # a striped reader's residue that does not hold entry 20, over the same run
        other_residue = read(1, stride=3)
        assert other_residue.status == S.EOK and list(other_residue.bodies) == bodies[1::3]
        same_residue = read(2, stride=3)
        assert same_residue.status == S.EOK and list(same_residue.bodies) == bodies[2:DAMAGED:3]
