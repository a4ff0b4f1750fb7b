"""The bookie's add port over real loopback TCP, with an in-memory core: the same answers as the
gRPC AddEntries stream, a bad connection closed without hurting the others, and a clean end on
shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_port_peer import connect
from tests.support.add_requests import MASTER_KEY, add_request, fake_entry
from tests.support.fake_bookie_core import FakeBookieCore

from bkproto.add_port import FRAME_HEADER, MAX_FRAME_BYTES, PREFACE, frame
from bkproto.v1 import bookie_pb2
from bookie import add_port
from bookie.handlers import HandlerLimits
from bookie.limits import ListenerLimits
from bookie.service import BookieService
from bookie.stats import RequestStats

pytestmark = pytest.mark.both_loops  # the add port's protocols on both loops (tests.support.event_loops)

S = bookie_pb2


@pytest.fixture
async def service() -> AsyncIterator[tuple[BookieService, FakeBookieCore]]:
    core = FakeBookieCore()
    limits = HandlerLimits(max_entry_bytes=4096, add_stream_window=3)
    service = BookieService(core, RequestStats(CollectorRegistry()), "127.0.0.1", 0, limits, add_port=0)
    await service.start()
    yield service, core
    await service.stop(0)


async def test_batches_are_acknowledged_per_add_in_order(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    bookie, core = service
    assert bookie.add_port is not None and bookie.add_port not in (0, bookie.port)
    conn = await connect(bookie)
    await conn.send(*(add_request(1, e) for e in range(3)))
    await conn.send(add_request(1, 3), add_request(1, 4, key=b"wrong" * 4))
    first, second = await conn.receive(), await conn.receive()
    assert first is not None and second is not None
    assert [(r.status, r.entry_id) for r in first.results] == [(S.EOK, 0), (S.EOK, 1), (S.EOK, 2)]
    assert [(r.status, r.entry_id) for r in second.results] == [(S.EOK, 3), (S.EUA, 4)]
    assert core.ledgers[1].entries[2] == fake_entry(1, 2)
    assert core.add_calls == [3, 2]  # one core call per message, as over gRPC


async def test_batches_are_pipelined_up_to_the_stream_window(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    bookie, core = service
    core.add_gate = asyncio.Event()
    conn = await connect(bookie)
    for e in range(5):
        await conn.send(add_request(2, e))
    await core.wait_for_add_calls(3)
    await asyncio.sleep(0.1)
    assert len(core.add_calls) == 3  # window 3: the socket is not read further meanwhile
    core.add_gate.set()
    responses = [await conn.receive() for _ in range(5)]
    assert [r.results[0].entry_id for r in responses if r is not None] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("payload", "fault"),
    [
        (b"HTTP/1.1", "expected the add-port preface"),
        (PREFACE + FRAME_HEADER.pack(MAX_FRAME_BYTES + 1), f"frame of {MAX_FRAME_BYTES + 1} bytes exceeds"),
        (PREFACE + frame(b"\xff\xff\xff"), "ending the stream"),
    ],
    ids=["wrong preface", "oversized frame", "unparsable message"],
)
async def test_a_broken_connection_is_closed_with_the_reason_and_others_carry_on(
    service: tuple[BookieService, FakeBookieCore],
    caplog: pytest.LogCaptureFixture,
    payload: bytes,
    fault: str,
) -> None:
    bookie, core = service
    healthy = await connect(bookie)
    caplog.set_level(logging.WARNING, logger="bookie.add_port")
    bad = await connect(bookie, preface=b"")
    bad.writer.write(payload)
    assert await bad.reader.read() == b""  # closed by the bookie, nothing answered
    assert any(fault in r.getMessage() for r in caplog.records), caplog.text
    await healthy.send(add_request(3, 0))
    response = await healthy.receive()
    assert response is not None and response.results[0].status == S.EOK
    assert core.ledgers[3].entries[0] == fake_entry(3, 0)


async def test_stop_answers_started_batches_then_closes_the_connection(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    bookie, core = service
    core.add_gate = asyncio.Event()
    conn = await connect(bookie)
    await conn.send(add_request(4, 0))
    await core.wait_for_add_calls(1)
    stopping = asyncio.ensure_future(bookie.stop(10))
    await asyncio.sleep(0.1)
    with pytest.raises(OSError):  # no new connections once stopping
        await connect(bookie)
    core.add_gate.set()
    response = await conn.receive()
    assert response is not None and response.results[0].status == S.EOK
    assert await conn.receive() is None  # then the stream ends, between frames
    await stopping


async def test_no_add_port_unless_asked() -> None:
    service = BookieService(FakeBookieCore(), RequestStats(CollectorRegistry()), "127.0.0.1", 0)
    await service.start()
    try:
        assert service.add_port is None
    finally:
        await service.stop(0)


async def test_a_connection_that_never_sends_the_preface_is_closed(
    service: tuple[BookieService, FakeBookieCore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(add_port, "PREFACE_TIMEOUT_S", 0.2)
    bookie, _ = service
    silent = await connect(bookie, preface=b"")
    assert await asyncio.wait_for(silent.reader.read(), 5) == b""
    assert "no preface within 0.2 s" in caplog.text
    assert bookie.add_port_connections == 0


async def test_a_large_batch_arriving_in_pieces_is_stored_byte_for_byte(
    service: tuple[BookieService, FakeBookieCore],
) -> None:
    bookie, core = service
    adds = [
        bookie_pb2.AddRequest(
            ledger_id=5, entry_id=e, master_key=MASTER_KEY, body=fake_entry(5, e, payload=bytes([e]) * 3000)
        )
        for e in range(40)
    ]  # a message well over the size read in one step
    message = frame(bookie_pb2.AddEntriesRequest(adds=adds).SerializeToString())
    conn = await connect(bookie)
    for start in range(0, len(message), 7000):
        conn.writer.write(message[start : start + 7000])
        await conn.writer.drain()
        await asyncio.sleep(0.001)
    response = await conn.receive()
    assert response is not None and [r.status for r in response.results] == [S.EOK] * 40
    assert [core.ledgers[5].entries[e] for e in range(40)] == [a.body for a in adds]


async def test_a_frame_not_received_whole_in_time_closes_its_connection_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    listener_limits = ListenerLimits(frame_timeout_s=0.3)
    bookie = BookieService(
        FakeBookieCore(), RequestStats(registry), "127.0.0.1", 0, add_port=0, listener_limits=listener_limits
    )
    await bookie.start()
    try:
        idle = await connect(bookie)
        dribbling = await connect(bookie)
        message = frame(bookie_pb2.AddEntriesRequest(adds=[add_request(6, 0)]).SerializeToString())
        dribbling.writer.write(message[: len(message) // 2])  # then nothing more
        assert await asyncio.wait_for(dribbling.reader.read(), 5) == b""
        assert "a frame not received whole within 0.3 s" in caplog.text
        rejected = registry.get_sample_value(
            "bookkeeper_server_LIMIT_REJECTIONS_total", {"listener": "add_port", "limit": "frame_timeout"}
        )
        assert rejected == 1
        # The idle connection (nothing started) outlived the timeout and still works.
        await idle.send(add_request(6, 0))
        response = await idle.receive()
        assert response is not None and response.results[0].status == S.EOK
    finally:
        await bookie.stop(0)
