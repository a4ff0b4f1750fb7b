"""The bytes of read answers built and not yet sent: one budget, with a share per IP address.

A read answer carries entry bodies: a ReadEntries answer up to ``max_read_batch_bytes``, a read
or a stride poll its entries. An answer its peer does not take stays in memory: in gRPC's core
until the call ends, in a read stream's queue until it is written. Without a bound, a peer with
many calls or stream requests in flight that takes no answers makes the bookie hold every one
(docs/limits.md has the measured attack). So every answer with bodies
reserves its bytes in one :class:`~bookie.limits.PeerByteBudget` (``read_answers_max_bytes``
with ``read_answers_max_bytes_per_peer`` for one IP address; the servicer's handlers share it as
``answer_bytes``), and gives them back once it is sent or dropped; past the budget the request
waits:

- a ReadEntries request reserves its bound before it reads (``max_bytes``, known up front), then
  what it read (its first entry comes whatever ``max_bytes`` says);
- a read or a stride poll reserves what it read (a long poll may park for long, and its size is
  known only once read).

An answer that does not fit is dropped, and read again once that much room comes
(:func:`reserved_answer`), so the answers that wait hold nothing. Read again, a request neither
parks nor fences a second time: the handlers' ``rereadable`` serves a plain read of what the
first answer held.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc.aio

from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage
from bookie.limits import PeerByteBudget

A = TypeVar("A")


async def reserved_answer(
    serve: Callable[[], Awaitable[A]],
    size_of: Callable[[A], int],
    budget: PeerByteBudget,
    peer: str,
    bound: int = 0,
) -> tuple[A, int]:
    """``serve()``'s answer and the bytes reserved for it in ``budget`` (``bound`` of them before
    it is served, then what it holds). An answer that does not fit is dropped and served again
    once its size fits: ``serve`` then reads the same entries again (an entry -1 may have become
    a later one, which that round sizes again). A request served twice is counted twice in the
    request metrics."""
    reserved = 0  # held before serving: the bound, or the size of an answer dropped for want of room
    try:
        if bound:
            await budget.acquire(peer, bound)
            reserved = bound
        while True:
            answer = await serve()
            size = size_of(answer)
            if size <= reserved:
                if size < reserved:
                    budget.release(peer, reserved - size)
                return answer, size
            if reserved:
                budget.release(peer, reserved)
                reserved = 0
            if budget.try_acquire(peer, size):
                return answer, size
            del answer  # the wait holds nothing
            await budget.acquire(peer, size)
            reserved = size
    except BaseException:
        if reserved:
            budget.release(peer, reserved)
        raise


def release_when_call_ends(
    context: grpc.aio.ServicerContext[Any, Any], budget: PeerByteBudget, peer: str, nbytes: int
) -> None:
    """Give ``nbytes`` back to ``budget`` when the unary call ends: gRPC holds its answer until
    then (its task's done-callbacks run once the answer and status are sent, or the call failed)."""
    if nbytes:
        # grpc calls it with the context (the stubs declare the callback as a class, not a protocol)
        release = functools.partial(budget.release_for, peer, nbytes)
        context.add_done_callback(release)  # type: ignore[arg-type]


def read_body_bytes(answer: bookie_pb2.ReadResponse) -> int:
    return len(answer.body)


def stride_poll_body_bytes(answer: bookie_pb2.StridePollResponse) -> int:
    return sum(map(len, answer.bodies))


def read_entries_bytes(answer: bookie_pb2.ReadEntriesResponse | EncodedMessage) -> int:
    """An answer's wire bytes (an error answer's, a protobuf message, count as none)."""
    return len(answer.data) if isinstance(answer, EncodedMessage) else 0
