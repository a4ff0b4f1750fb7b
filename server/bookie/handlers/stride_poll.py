"""StridePoll: a tailing reader's long poll for its share of the coming entries (pybookkeeper
extension, served on ReadStream only).

A ReadEntry long poll answers with one entry, so a reader catching up after a pause (a disk stall
held the writer's acks, then a run of entries was confirmed at once) pays a request and an answer
per entry, on every side, exactly when it is furthest behind. A stride poll parks until the LAC
reaches ``first_entry_id`` and then answers with every confirmed entry of the stride this bookie
holds, bounded by ``max_count`` and ``max_bytes``: one message per bookie for the whole run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio

from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError, bad_request
from bookie.handlers.common import UnaryHandler, lac_for_error, require_ledger_id, status_code
from bookie.stats import OpLatency

MAX_STRIDE = 1024  # an ensemble size; far beyond any real one


class StridePollHandler(UnaryHandler[bookie_pb2.StridePollRequest, bookie_pb2.StridePollResponse]):
    name = "stride poll"

    def stat_for(self, request: bookie_pb2.StridePollRequest) -> OpLatency:
        return self.stats.stride_poll_request

    def error_response(
        self, request: bookie_pb2.StridePollRequest, status: int, message: str
    ) -> bookie_pb2.StridePollResponse:
        return bookie_pb2.StridePollResponse(
            status=status_code(status),
            ledger_id=request.ledger_id,
            first_entry_id=request.first_entry_id,
            stride=request.stride,
            max_lac=lac_for_error(self.core, request.ledger_id, status),
            message=message,
        )

    async def serve(self, request: bookie_pb2.StridePollRequest) -> bookie_pb2.StridePollResponse:
        ledger_id = request.ledger_id
        first = request.first_entry_id
        stride = request.stride
        require_ledger_id(ledger_id)
        if first < 0:
            raise bad_request(f"first entry id {first} is negative")
        if not 1 <= stride <= MAX_STRIDE:
            raise bad_request(f"stride {stride} is outside 1..{MAX_STRIDE}")
        max_count, max_bytes = self.limits.read_batch(request.max_count, request.max_bytes)
        wait_s = self.limits.long_poll_seconds(request.timeout_ms)
        # a poll that does not wait is not parked: it takes no slot of the peer's long polls
        with self.long_polls.slot() if wait_s > 0 else contextlib.nullcontext():
            lac = await self.core.wait_for_lac(ledger_id, first - 1, wait_s)
        if lac < first:
            return self._nothing(request, lac, f"LAC of ledger {ledger_id} is still {lac}")
        try:
            bodies = await self.core.read_entries(
                ledger_id, first, max_count, max_bytes, stride=stride, last_entry_id=lac
            )
        except BookieError as exc:
            if exc.status not in (bookie_pb2.ENOENTRY, bookie_pb2.ENOLEDGER):
                raise
            # Confirmed but not stored here (written before this bookie joined the ensemble).
            return self._nothing(request, lac, f"entry {first} of ledger {ledger_id} is not on this bookie")
        return bookie_pb2.StridePollResponse(
            status=bookie_pb2.EOK,
            ledger_id=ledger_id,
            first_entry_id=first,
            stride=stride,
            bodies=bodies,
            max_lac=self.core.last_add_confirmed(ledger_id),
        )

    def rereadable(
        self, request: bookie_pb2.StridePollRequest, context: grpc.aio.ServicerContext[Any, Any] | None
    ) -> Callable[[], Awaitable[bookie_pb2.StridePollResponse]]:
        """``request`` served as asked, then, each time again (its answer dropped for want of
        answer budget), without waiting: the LAC it waited for has come, and a second park might
        be refused as one poll too many, or wait out a deleted ledger."""
        current = request

        async def serve() -> bookie_pb2.StridePollResponse:
            nonlocal current
            answer = await self(current, context)  # type: ignore[arg-type]  # a stream may have none
            if current.timeout_ms:
                current = bookie_pb2.StridePollRequest()
                current.CopyFrom(request)
                current.timeout_ms = 0
            return answer

        return serve

    def _nothing(
        self, request: bookie_pb2.StridePollRequest, lac: int, message: str
    ) -> bookie_pb2.StridePollResponse:
        return bookie_pb2.StridePollResponse(
            status=bookie_pb2.ENOENTRY,
            ledger_id=request.ledger_id,
            first_entry_id=request.first_entry_id,
            stride=request.stride,
            max_lac=lac,
            message=message,
        )
