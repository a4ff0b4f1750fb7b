"""ReadEntries: consecutive entries in one response (catch-up reads and the shell's readledger), or
every ``stride``-th one (a re-replicating client's share of this bookie, pybookkeeper extension).

Every answer reserves its byte bound, then what it holds, in the budget of read answers not yet
sent (:mod:`bookie.handlers.answer_budget`).
"""

from __future__ import annotations

from typing import Any

import grpc.aio

from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage, encode_read_entries_ok
from bookie.errors import BookieError, bad_request
from bookie.handlers.answer_budget import read_entries_bytes, release_when_call_ends, reserved_answer
from bookie.handlers.common import MAX_ENTRY_ID, UnaryHandler, require_ledger_id, status_code
from bookie.handlers.stride_poll import MAX_STRIDE
from bookie.limits import peer_host
from bookie.stats import OpLatency

ReadEntriesAnswer = bookie_pb2.ReadEntriesResponse | EncodedMessage


class ReadEntriesHandler(UnaryHandler[bookie_pb2.ReadEntriesRequest, ReadEntriesAnswer]):
    """An answer of a thousand bodies leaves as wire bytes built in one join
    (:func:`bkproto.wire.encode_read_entries_ok`), not as a protobuf message that copies each body
    twice; errors are ordinary messages."""

    name = "batched read"

    def answer_bound(self, request: bookie_pb2.ReadEntriesRequest) -> int:
        """The bodies' bytes the answer to ``request`` may hold (its first body may be larger, up
        to an entry's limit); a request the handler refuses holds next to nothing."""
        try:
            return self.limits.read_batch(request.max_count, request.max_bytes)[1]
        except BookieError:
            return 0

    async def unary(
        self, request: bookie_pb2.ReadEntriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> ReadEntriesAnswer:
        """A unary call's answer, its byte bound reserved first, then what it holds, given back
        when the call ends (until then gRPC may hold the answer, unsent)."""
        peer = peer_host(context.peer())
        answer, reserved = await reserved_answer(
            lambda: self(request, context), read_entries_bytes, self.answer_bytes, peer,
            self.answer_bound(request),
        )  # fmt: skip
        release_when_call_ends(context, self.answer_bytes, peer, reserved)
        return answer

    def stat_for(self, request: bookie_pb2.ReadEntriesRequest) -> OpLatency:
        return self.stats.read_entries_request

    def error_response(
        self, request: bookie_pb2.ReadEntriesRequest, status: int, message: str
    ) -> bookie_pb2.ReadEntriesResponse:
        return bookie_pb2.ReadEntriesResponse(
            status=status_code(status),
            ledger_id=request.ledger_id,
            first_entry_id=request.first_entry_id,
            message=message,
        )

    async def serve(self, request: bookie_pb2.ReadEntriesRequest) -> ReadEntriesAnswer:
        ledger_id = request.ledger_id
        first = request.first_entry_id
        require_ledger_id(ledger_id)
        if first < 0:
            raise bad_request(f"first entry id {first} is negative")
        stride = request.stride or 1
        if not 1 <= stride <= MAX_STRIDE:
            raise bad_request(f"stride {stride} is outside 1..{MAX_STRIDE}")
        # 0 bytes means "no preference"; either way the response stays under the message limit.
        max_count, max_bytes = self.limits.read_batch(request.max_count, request.max_bytes)
        # Entry ids are signed 64-bit: never ask for one past the largest.
        max_count = min(max_count, (MAX_ENTRY_ID - first) // stride + 1)
        bodies = await self.core.read_entries(ledger_id, first, max_count, max_bytes, stride=stride)
        return EncodedMessage(
            encode_read_entries_ok(ledger_id, first, bodies, self.core.last_add_confirmed(ledger_id))
        )
