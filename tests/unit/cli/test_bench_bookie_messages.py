"""``pybk bench bookie``'s messages (the client's, or one AddRequest per add), how it counts the
answers (a count of leading successes, a result per add after them, a short answer an error) and
which transport the options choose."""

from __future__ import annotations

import argparse

import pytest
from tests.support.scripted_add_call import AnsweringAddCall

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from pybk.bench.bookie import ADD_PORT, GRPC, SetupError, choose_target
from pybk.bench.bookie_adds import DIGEST, MASTER_KEY, AddMessages, AnswerTally, PipelinedAdds
from pybk.main import build_parser

S = bookie_pb2
PAYLOAD = b"p" * 10


def body(ledger_id: int, entry_id: int) -> bytes:
    return HEADER.pack(ledger_id, entry_id, entry_id - 1, (entry_id + 1) * len(PAYLOAD)) + DIGEST + PAYLOAD


def test_packed_messages_are_one_group_asking_for_a_count() -> None:
    message = S.AddEntriesRequest.FromString(AddMessages("packed", 7, PAYLOAD).message(3, 4))
    assert message.count_ok and not message.adds
    (group,) = message.packed
    assert (group.ledger_id, group.master_key, list(group.entry_ids)) == (7, MASTER_KEY, [3, 4, 5, 6])
    assert group.bodies == b"".join(body(7, e) for e in range(3, 7))
    assert list(group.body_sizes) == [len(body(7, e)) for e in range(3, 7)]


def test_a_lone_packed_add_is_an_adds_element_asking_for_a_count() -> None:
    message = S.AddEntriesRequest.FromString(AddMessages("packed", 7, PAYLOAD).message(5, 1))
    assert message == S.AddEntriesRequest(
        adds=[S.AddRequest(ledger_id=7, entry_id=5, master_key=MASTER_KEY, body=body(7, 5))], count_ok=True
    )


def test_per_add_messages_are_the_earlier_protobuf_form() -> None:
    earlier = S.AddEntriesRequest(
        adds=[S.AddRequest(ledger_id=7, entry_id=e, master_key=MASTER_KEY, body=body(7, e)) for e in range(3)]
    )
    assert AddMessages("per-add", 7, PAYLOAD).message(0, 3) == earlier.SerializeToString()


def test_answers_count_leading_successes_then_each_result() -> None:
    tally = AnswerTally()
    tally.count(S.AddEntriesResponse(ok_count=5), 5)
    tally.count(S.AddEntriesResponse(ok_count=2, results=[S.AddResponse(status=S.EFENCED, message="fenced"),
                                                          S.AddResponse(status=S.EOK)]), 4)
    tally.count(S.AddEntriesResponse(results=[S.AddResponse(status=S.EOK)] * 3), 3)
    assert (tally.acked, tally.errors, tally.first_error) == (11, 1, "EFENCED: fenced")


def test_an_answer_for_fewer_or_more_adds_fails_the_whole_message() -> None:
    tally = AnswerTally()
    tally.count(S.AddEntriesResponse(ok_count=3), 4)
    tally.count(S.AddEntriesResponse(ok_count=4, results=[S.AddResponse(status=S.EOK)]), 4)
    assert (tally.acked, tally.errors) == (0, 8)
    assert tally.first_error == "an answer for 3 adds to a message of 4"
    with pytest.raises(RuntimeError, match="ended the add stream"):
        tally.count(object(), 1)  # grpc.aio.EOF


async def test_pipelined_adds_count_every_answer() -> None:
    def answer(message: S.AddEntriesRequest) -> S.AddEntriesResponse:
        (group,) = message.packed
        adds = len(group.entry_ids)
        return S.AddEntriesResponse(ok_count=adds - 1 if group.entry_ids[0] == 20 else adds)  # one short

    call = AnsweringAddCall(answer)
    adds = PipelinedAdds(lambda: call, window=25, batch=10)
    await adds.run(AddMessages("packed", 9, PAYLOAD), 45)
    assert [len(m.packed[0].entry_ids) for m in call.sent] == [10, 10, 10, 10, 5]
    assert (adds.answers.acked, adds.answers.errors) == (35, 10)
    assert adds.latencies.histogram.get_total_count() == 45
    assert call.cancelled


def options(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", "bookie", "--bookie", "bk1:3181", *argv])


async def test_the_transport_is_the_add_port_when_known() -> None:
    assert await choose_target(options("--add-port", "3281")) == (ADD_PORT, "bk1:3281")
    assert await choose_target(options()) == (GRPC, "bk1:3181")
    assert await choose_target(options("--transport", "grpc")) == (GRPC, "bk1:3181")
    with pytest.raises(SetupError, match="needs the add port"):
        await choose_target(options("--transport", "add-port"))
    with pytest.raises(SetupError, match="does not use it"):
        await choose_target(options("--transport", "grpc", "--add-port", "3281"))
    with pytest.raises(SystemExit):  # one way to name the add port at a time
        options("--add-port", "3281", "--zk", "zk:2181")
