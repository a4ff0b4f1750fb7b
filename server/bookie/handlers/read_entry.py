"""ReadEntry: plain reads, fencing reads and LAC long-poll reads (BookKeeper's
ReadEntryProcessorV3 and LongPollReadEntryProcessorV3).

* Plain: the entry (``entry_id == -1``: the last entry the bookie has) plus the bookie's LAC.
* FENCE_LEDGER: fence durably with the master key (EUA without one), then read as above; the
  recovering client reads entry -1 this way.
* Long poll (``previous_lac`` set): park in :meth:`BookieCore.wait_for_lac` until the LAC passes
  ``previous_lac`` or the timeout. With ENTRY_PIGGYBACK (entry id must be -1) the response carries
  entry ``previous_lac + 1``; without it, the requested entry. When the wait times out the answer
  is ENOENTRY with the unchanged LAC in ``max_lac``: "nothing new yet".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio

from bkproto.entry_format import LAST_ADD_CONFIRMED
from bkproto.v1 import bookie_pb2
from bkproto.wire import EncodedMessage
from bookie.errors import bad_request
from bookie.handlers.answer_budget import read_body_bytes, release_when_call_ends, reserved_answer
from bookie.handlers.common import (
    UnaryHandler,
    lac_for_error,
    require_ledger_id,
    require_master_key,
    status_code,
)
from bookie.limits import peer_host
from bookie.stats import OpLatency

FENCE_LEDGER = bookie_pb2.FENCE_LEDGER
ENTRY_PIGGYBACK = bookie_pb2.ENTRY_PIGGYBACK


class ReadEntryHandler(UnaryHandler[bookie_pb2.ReadRequest, bookie_pb2.ReadResponse]):
    name = "read entry"

    def stat_for(self, request: bookie_pb2.ReadRequest) -> OpLatency:
        if request.flags & FENCE_LEDGER:
            return self.stats.read_entry_fence_request
        if request.HasField("previous_lac"):
            return self.stats.read_entry_long_poll_request
        return self.stats.read_entry_request

    def error_response(
        self, request: bookie_pb2.ReadRequest, status: int, message: str
    ) -> bookie_pb2.ReadResponse:
        return bookie_pb2.ReadResponse(
            status=status_code(status),
            ledger_id=request.ledger_id,
            entry_id=request.entry_id,
            max_lac=lac_for_error(self.core, request.ledger_id, status),
            message=message,
        )

    async def unary(
        self, request: bookie_pb2.ReadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> EncodedMessage:
        """A unary call's answer, its body's bytes reserved in the answer budget until the call
        ends (:mod:`bookie.handlers.answer_budget`). In wire bytes: gRPC holds the answer it
        was given until the call ends, unsent if the peer takes nothing, and a protobuf message
        would stay besides its serialization and gRPC core's copy (an unsent answer of a 2 MiB
        entry cost about four times its body in RSS, about three times now; docs/limits.md)."""
        peer = peer_host(context.peer())
        answer, reserved = await reserved_answer(
            self.rereadable(request, context), read_body_bytes, self.answer_bytes, peer
        )
        release_when_call_ends(context, self.answer_bytes, peer, reserved)
        return EncodedMessage(answer.SerializeToString(), answer.status)

    def rereadable(
        self, request: bookie_pb2.ReadRequest, context: grpc.aio.ServicerContext[Any, Any] | None
    ) -> Callable[[], Awaitable[bookie_pb2.ReadResponse]]:
        """``request`` served as asked, then, each time again (its answer dropped for want of
        answer budget), a plain read of the entry it answered with: no second park (which might
        be refused as one poll too many, or wait out a deleted ledger) and no second fence."""
        current = request

        async def serve() -> bookie_pb2.ReadResponse:
            nonlocal current
            answer = await self(current, context)  # type: ignore[arg-type]  # a stream may have none
            if answer.status == bookie_pb2.EOK:
                current = bookie_pb2.ReadRequest(ledger_id=answer.ledger_id, entry_id=answer.entry_id)
            return answer

        return serve

    async def serve(self, request: bookie_pb2.ReadRequest) -> bookie_pb2.ReadResponse:
        ledger_id = request.ledger_id
        entry_id = request.entry_id
        require_ledger_id(ledger_id)
        if entry_id < LAST_ADD_CONFIRMED:
            raise bad_request(f"entry id {entry_id} is invalid (-1 asks for the last entry)")
        if request.flags & FENCE_LEDGER:
            if request.HasField("previous_lac"):
                raise bad_request("a fencing read cannot also be a long-poll read")
            require_master_key(request.master_key, f"fencing read of ledger {ledger_id}")
            await self.core.fence(ledger_id, request.master_key)
        elif request.HasField("previous_lac"):
            return await self._long_poll(request)
        body = await self.core.read_entry(ledger_id, entry_id)
        return self._found(ledger_id, entry_id, body)

    async def _long_poll(self, request: bookie_pb2.ReadRequest) -> bookie_pb2.ReadResponse:
        ledger_id = request.ledger_id
        previous_lac = request.previous_lac
        piggyback = bool(request.flags & ENTRY_PIGGYBACK)
        if previous_lac < LAST_ADD_CONFIRMED:
            raise bad_request(f"previous_lac {previous_lac} is invalid")
        wait_s = self.limits.long_poll_seconds(request.timeout_ms)
        if piggyback and request.entry_id != LAST_ADD_CONFIRMED:
            raise bad_request(
                "ENTRY_PIGGYBACK long poll must ask for entry -1 (the entry after previous_lac)"
            )
        with self.long_polls.slot():
            lac = await self.core.wait_for_lac(ledger_id, previous_lac, wait_s)
        if lac <= previous_lac:
            return bookie_pb2.ReadResponse(
                status=bookie_pb2.ENOENTRY,
                ledger_id=ledger_id,
                entry_id=request.entry_id,
                max_lac=lac,
                lac_update_timestamp=self.core.lac_update_timestamp(ledger_id),
                message=f"LAC of ledger {ledger_id} is still {lac} after {request.timeout_ms} ms",
            )
        entry_id = previous_lac + 1 if piggyback else request.entry_id
        body = await self.core.read_entry(ledger_id, entry_id)
        return self._found(ledger_id, entry_id, body)

    def _found(self, ledger_id: int, entry_id: int, body: bytes) -> bookie_pb2.ReadResponse:
        if entry_id == LAST_ADD_CONFIRMED and len(body) >= 16:
            entry_id = int.from_bytes(body[8:16], "big", signed=True)  # the header's entry id
        return bookie_pb2.ReadResponse(
            status=bookie_pb2.EOK,
            ledger_id=ledger_id,
            entry_id=entry_id,
            body=body,
            max_lac=self.core.last_add_confirmed(ledger_id),
            lac_update_timestamp=self.core.lac_update_timestamp(ledger_id),
        )
