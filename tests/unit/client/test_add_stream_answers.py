"""The client's add stream asks every message's successes as a count (``count_ok``) and completes
its adds from the answer: the counted ones in bulk, the rest each by its own result, also from a
bookie that ignores the flag and answers one result per add; an answer that does not cover its
message's adds exactly fails the stream and every add."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.support.scripted_add_call import CompletionLog, ScriptedAddCall

from bkclient.add_stream import AddRequestEncoder, AddStream
from bkclient.bookie_client import BookieClientOptions
from bkproto.errors import ClientClosedError
from bkproto.v1 import bookie_pb2

EOK, EFENCED = bookie_pb2.EOK, bookie_pb2.EFENCED
ENCODER = AddRequestEncoder(5, b"k" * 20)
Stream = tuple[AddStream, ScriptedAddCall]


@pytest.fixture
async def stream() -> AsyncIterator[Stream]:
    call = ScriptedAddCall()
    add_stream = AddStream("bookie-1", BookieClientOptions(), call, lambda _: None)
    yield add_stream, call
    add_stream.fail(ClientClosedError("test over"))
    await add_stream.wait_closed()


async def send(stream: Stream, entry_ids: list[int], listener: CompletionLog) -> None:
    """Queue entries ``entry_ids`` of ledger 5 and wait until their message is written."""
    add_stream, call = stream
    add_stream.enqueue_bodies(ENCODER, [b"body%d" % e for e in entry_ids], listener, entry_ids)
    await call.got_message.wait()
    call.got_message.clear()


def result(status: int, entry_id: int) -> bookie_pb2.AddResponse:
    return bookie_pb2.AddResponse(status=status, ledger_id=5, entry_id=entry_id, message="m")


async def test_every_message_asks_for_a_count_and_an_all_counted_answer_completes_in_one_call(
    stream: Stream,
) -> None:
    add_stream, call = stream
    log = CompletionLog()
    await send(stream, [0, 1, 2], log)
    await send(stream, [3], log)  # a lone add: an ``adds`` element, not a group
    assert [message.count_ok for message in call.sent] == [True, True]
    call.answer(bookie_pb2.AddEntriesResponse(ok_count=3))
    call.answer(bookie_pb2.AddEntriesResponse(ok_count=1))
    await log.wait(4)
    assert log.calls == [("all", [0, 1, 2]), ("all", [3])]
    assert not add_stream.failed


async def test_a_count_then_results_complete_the_counted_adds_in_bulk_and_the_rest_each(
    stream: Stream,
) -> None:
    call = stream[1]
    log = CompletionLog()
    await send(stream, [0, 1, 2, 3], log)
    call.answer(bookie_pb2.AddEntriesResponse(ok_count=2, results=[result(EFENCED, 2), result(EOK, 3)]))
    await log.wait(4)
    assert log.calls == [("all", [0, 1]), (2, "LedgerFencedError"), (3, None)]


async def test_a_bookie_that_ignores_the_flag_answers_one_result_per_add(
    stream: Stream,
) -> None:
    call = stream[1]
    log = CompletionLog()
    await send(stream, [0, 1], log)
    call.answer(bookie_pb2.AddEntriesResponse(results=[result(EOK, 0), result(EOK, 1)]))
    await log.wait(2)
    await send(stream, [2, 3], log)
    call.answer(bookie_pb2.AddEntriesResponse(results=[result(EOK, 2), result(EFENCED, 3)]))
    await log.wait(4)
    assert log.calls == [("all", [0, 1]), (2, None), (3, "LedgerFencedError")]


@pytest.mark.parametrize(("ok_count", "results"), [(2, 2), (4, 0), (1, 0), (0, 2)])
async def test_an_answer_that_does_not_cover_its_adds_exactly_fails_the_stream_and_every_add(
    stream: Stream, ok_count: int, results: int
) -> None:
    add_stream, call = stream
    log = CompletionLog()
    await send(stream, [0, 1, 2], log)
    call.answer(bookie_pb2.AddEntriesResponse(ok_count=ok_count, results=[result(EOK, 0)] * results))
    await log.wait(3)
    assert add_stream.failed
    assert sorted(log.calls) == [(0, "BookieUnavailableError"), (1, "BookieUnavailableError"),
                                 (2, "BookieUnavailableError")]
