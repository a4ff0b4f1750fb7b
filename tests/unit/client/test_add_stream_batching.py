"""How the client's add stream cuts what is queued into messages: as many adds as fit the byte
budget (at least one), in queue order, whatever the calls that queued them; over the add port each
message goes with its length header."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.support.scripted_add_call import CompletionLog, ScriptedAddCall, ScriptedAddPortCall

from bkclient.add_stream import AddRequestEncoder, AddStream
from bkclient.bookie_client import BookieClientOptions
from bkproto.errors import ClientClosedError
from bkproto.v1 import bookie_pb2

ENCODER = AddRequestEncoder(5, b"k" * 20)


@pytest.fixture(params=[ScriptedAddCall, ScriptedAddPortCall], ids=["grpc", "add-port"])
async def stream(request: pytest.FixtureRequest) -> AsyncIterator[tuple[AddStream, ScriptedAddCall]]:
    call = request.param()
    add_stream = AddStream("bookie-1", BookieClientOptions(max_batch_bytes=1000), call, lambda _: None)
    yield add_stream, call
    add_stream.fail(ClientClosedError("test over"))
    await add_stream.wait_closed()


def sent_ids(call: ScriptedAddCall) -> list[list[int]]:
    """The entry ids of each message sent, in order."""
    return [
        [a.entry_id for a in message.adds] + [i for group in message.packed for i in group.entry_ids]
        for message in call.sent
    ]


async def test_queued_bodies_leave_in_messages_that_fit_the_budget(
    stream: tuple[AddStream, ScriptedAddCall],
) -> None:
    add_stream, call = stream
    log = CompletionLog()
    # queued in three calls in one step: the sender sees all ten at once
    add_stream.enqueue_bodies(ENCODER, [b"a" * 300] * 4, log, [0, 1, 2, 3])
    add_stream.enqueue_bodies(ENCODER, [b"b" * 300] * 5, log, [4, 5, 6, 7, 8])
    add_stream.enqueue_bodies(ENCODER, [b"c" * 2000], log, [9])  # alone over the budget
    await answer_until(call, 10)
    assert sent_ids(call) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    await log.wait(10)
    # the queue's byte count came back to zero: two small adds leave together
    add_stream.enqueue_bodies(ENCODER, [b"d" * 100] * 2, log, [10, 11])
    await answer_until(call, 12)
    assert sent_ids(call)[-1] == [10, 11]


async def answer_until(call: ScriptedAddCall, adds: int) -> None:
    """Answer each message as it comes (all its adds counted) until ``adds`` adds were sent."""
    answered = len(call.sent)
    while sum(map(len, sent_ids(call))) < adds:
        await asyncio.wait_for(call.got_message.wait(), 5)
        call.got_message.clear()
        for ids in sent_ids(call)[answered:]:
            call.answer(bookie_pb2.AddEntriesResponse(ok_count=len(ids)))
        answered = len(call.sent)
