"""Durability of a real bookie process: kill -9 in the middle of a pipelined add stream, and a
journal damaged on disk (torn tail, flipped byte) while the bookie is down."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from tests.support.bookies import BookieFactory, BookieProcess, entry_body

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie.storage.journal_format import FILE_HEADER_SIZE, RecordType, scan_records

pytestmark = pytest.mark.integration

S = bookie_pb2
KEY = b"d" * 20


def reading_stub(process: BookieProcess) -> Iterator[bookie_pb2_grpc.BookieStub]:
    with grpc.insecure_channel(process.address) as channel:
        yield bookie_pb2_grpc.BookieStub(channel)


def read(stub: bookie_pb2_grpc.BookieStub, ledger_id: int, entry_id: int) -> bookie_pb2.ReadResponse:
    return stub.ReadEntry(S.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=30)


@pytest.mark.parametrize(("stop", "journals"), [("kill9", 1), ("sigterm", 1), ("kill9", 2)])
async def test_stop_mid_stream_loses_no_acknowledged_entry(
    bookie_factory: BookieFactory, stop: str, journals: int
) -> None:
    # A short flush interval: at a kill some entries are only in the journal, others also
    # in entry logs and indexes, so both recovery paths are exercised. SIGTERM drains instead:
    # the stream is answered up to the batches already started, then ends. With two journal dirs,
    # ledger 10 journals in the first and ledger 11 in the second, each with its own mark.
    bookie = bookie_factory(conf={"flushInterval": "200"}, journal_dirs=journals)
    acked: dict[tuple[int, int], bytes] = {}
    enough_acked = asyncio.Event()
    async with grpc.aio.insecure_channel(bookie.address) as channel:
        call = bookie_pb2_grpc.BookieStub(channel).AddEntries()
        in_flight: deque[list[tuple[int, int, bytes]]] = deque()
        room = asyncio.Event()
        # Before a SIGTERM the sender stops between two writes: a client write still under way
        # when the bookie ends the stream fails the whole call on the client's side ("Internal
        # error from Core"), whatever the bookie did, and the drain is what is tested here.
        stopping = asyncio.Event()
        parked = asyncio.Event()

        async def send() -> None:
            next_entry = {10: 0, 11: 0}
            for n in range(100_000):
                if stopping.is_set():
                    parked.set()
                    await asyncio.Future()  # cancelled at the end; the stream stays open
                ledger_id = 10 + n % 2
                batch = []
                for _ in range(50):
                    entry_id = next_entry[ledger_id]
                    next_entry[ledger_id] += 1
                    payload = os.urandom(200)
                    batch.append(
                        (ledger_id, entry_id, entry_body(ledger_id, entry_id, entry_id - 1, payload))
                    )
                while len(in_flight) >= 16:
                    room.clear()
                    await room.wait()
                in_flight.append(batch)
                adds = [
                    S.AddRequest(ledger_id=lid, entry_id=eid, master_key=KEY, body=b) for lid, eid, b in batch
                ]
                await call.write(S.AddEntriesRequest(adds=adds))

        async def receive() -> None:
            async for response in call:
                batch = in_flight.popleft()
                room.set()
                for result, (ledger_id, entry_id, body) in zip(response.results, batch, strict=True):
                    assert (result.ledger_id, result.entry_id) == (ledger_id, entry_id)
                    if result.status == S.EOK:
                        acked[(ledger_id, entry_id)] = body
                if len(acked) >= 5000:
                    enough_acked.set()

        tasks = [asyncio.ensure_future(send()), asyncio.ensure_future(receive())]
        done, _ = await asyncio.wait([*tasks, asyncio.ensure_future(enough_acked.wait())], timeout=120,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        assert enough_acked.is_set(), f"stream stopped early: {list(done)}"
        sender, receiver = tasks
        if stop == "kill9":
            await asyncio.to_thread(bookie.kill9)  # while batches are still in flight
            (received,) = await asyncio.gather(receiver, return_exceptions=True)
            assert isinstance(received, grpc.aio.AioRpcError), received  # the stream broke
        else:
            stopping.set()
            await asyncio.wait_for(parked.wait(), 30)
            assert await asyncio.to_thread(bookie.stop) == 0
            (received,) = await asyncio.gather(receiver, return_exceptions=True)
            # drained: started batches were answered, then the stream ended normally
            assert received is None, received
        sender.cancel()  # it may be waiting for window room that will never come
        await asyncio.gather(sender, return_exceptions=True)
    if stop == "kill9":
        assert in_flight, "the kill should have hit batches that were never acknowledged"
    if journals == 2:  # each journal dir holds the records of its own ledger, and only those
        assert [journaled_ledgers(d) for d in bookie.journal_dirs] == [{10}, {11}]
    await asyncio.to_thread(bookie.start)
    for stub in reading_stub(bookie):
        for ledger_id in (10, 11):
            expected = sorted(e for (lid, e) in acked if lid == ledger_id)
            assert expected == list(range(len(expected)))  # acks come back in order
            got: list[bytes] = []
            while len(got) < len(expected):
                r = stub.ReadEntries(
                    S.ReadEntriesRequest(ledger_id=ledger_id, first_entry_id=len(got), max_count=1000),
                    timeout=30,
                )
                assert r.status == S.EOK, (ledger_id, len(got), r.message)
                got.extend(r.bodies)
            assert got[: len(expected)] == [acked[(ledger_id, e)] for e in expected]


def journaled_ledgers(journal_dir: Path) -> set[int]:
    """Ledger ids of the entry records in the journal files of ``journal_dir``."""
    found: set[int] = set()
    for path in journal_dir.rglob("*.txn"):
        for rtype, payload, _ in scan_records(path.read_bytes(), FILE_HEADER_SIZE):
            if rtype is RecordType.ENTRY:
                found.add(HEADER.unpack_from(payload)[0])
    return found


def journal_files(bookie: BookieProcess) -> list[Path]:
    return [p for d in bookie.journal_dirs for p in sorted(d.rglob("*")) if p.is_file()]


def locate(bookie: BookieProcess, needle: bytes) -> tuple[Path, int]:
    found = []
    for path in journal_files(bookie):
        data = path.read_bytes()
        at = data.find(needle)
        if at >= 0:
            found.append((path, at))
            assert data.find(needle, at + 1) < 0, "payload should be journaled once"
    assert len(found) == 1, (
        f"payload in {len(found)} journal files: {[p.name for p in journal_files(bookie)]}"
    )
    return found[0]


def write_unflushed(bookie: BookieProcess, ledger_id: int, count: int) -> list[bytes]:
    """Acknowledged entries that live only in the journal (no flush happens before the kill)."""
    bodies = [
        entry_body(ledger_id, e, e - 1, b"<" + os.urandom(48).hex().encode() + b">") for e in range(count)
    ]
    for stub in reading_stub(bookie):
        for e, body in enumerate(bodies):  # one message each: several journal group commits
            add = S.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=KEY, body=body)
            assert stub.AddEntry(add, timeout=30).status == S.EOK
    bookie.kill9()
    return bodies


@pytest.fixture
def unflushed_bookie(bookie_factory: BookieFactory) -> BookieProcess:
    return bookie_factory(conf={"flushInterval": "3600000"})


def test_torn_journal_tail_is_cut_and_writing_resumes(unflushed_bookie: BookieProcess) -> None:
    bookie = unflushed_bookie
    bodies = write_unflushed(bookie, 30, 20)
    path, at = locate(bookie, bodies[-1][40:])
    os.truncate(path, at + 20)  # the last record ends half-written
    bookie.start()
    for stub in reading_stub(bookie):
        for e, body in enumerate(bodies[:-1]):
            r = read(stub, 30, e)
            assert (r.status, r.body) == (S.EOK, body), e
        torn = read(stub, 30, 19)
        assert torn.status == S.ENOENTRY, torn
        # the journal keeps working after the cut: the entry can be written again and read
        again = S.AddRequest(ledger_id=30, entry_id=19, master_key=KEY, body=bodies[-1])
        assert stub.AddEntry(again, timeout=30).status == S.EOK
    bookie.kill9()
    bookie.start()
    for stub in reading_stub(bookie):
        assert read(stub, 30, 19).body == bodies[-1]
        assert read(stub, 30, 0).body == bodies[0]


def test_flipped_byte_inside_a_journal_record_is_never_served(unflushed_bookie: BookieProcess) -> None:
    bookie = unflushed_bookie
    bodies = write_unflushed(bookie, 31, 20)
    damaged = 10
    path, at = locate(bookie, bodies[damaged][40:])
    with path.open("r+b") as f:
        f.seek(at + 17)
        original = f.read(1)
        f.seek(at + 17)
        f.write(bytes([original[0] ^ 0x40]))
    bookie.start()
    for stub in reading_stub(bookie):
        for e in range(damaged):
            r = read(stub, 31, e)
            assert (r.status, r.body) == (S.EOK, bodies[e]), e
        bad = read(stub, 31, damaged)
        assert bad.status == S.ENOENTRY, "the damaged record must not be served"
        for e in range(damaged + 1, len(bodies)):
            r = read(stub, 31, e)
            assert r.status == S.ENOENTRY or r.body == bodies[e], e  # never anything else
