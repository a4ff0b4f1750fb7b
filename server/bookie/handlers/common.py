"""What every request handler shares: limits, error translation at the boundary, timing.

A handler never lets an exception reach grpc: a :class:`~bookie.errors.BookieError` becomes the
response's status and message, anything else becomes EIO (logged with its traceback, because it is
a bug or a failing disk, not a bad request). Only cancellation propagates.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import grpc.aio

from bkproto.v1 import bookie_pb2
from bookie.api import BookieCore
from bookie.errors import BookieError, bad_request
from bookie.limits import CURRENT_CALL, PeerByteBudget, PeerLongPolls
from bookie.stats import OpLatency, RequestStats

log = logging.getLogger(__name__)

EOK = bookie_pb2.EOK
MiB = 1024 * 1024
MAX_ENTRY_ID = 2**63 - 1  # entry and ledger ids are Java longs


@dataclass(frozen=True, slots=True)
class HandlerLimits:
    """Bounds on what one request may ask for; everything beyond is EBADREQ, never a crash."""

    max_entry_bytes: int = 5 * MiB  # BookKeeper's nettyMaxFrameSizeBytes
    max_read_batch_bytes: int = 8 * MiB  # ReadEntries response bodies, under the 16 MiB message limit
    max_read_batch_count: int = 100_000
    max_long_poll_ms: int = 10 * 60 * 1000  # parked readers are bounded in time as well as number
    add_stream_window: int = 64  # request messages of one AddEntries stream being processed at once
    add_in_progress_max_bytes: int = 32 * MiB  # add messages being processed, all streams together
    add_in_progress_max_bytes_per_peer: int = 8 * MiB  # ... from one IP address (a share, for fairness)
    # add messages admitted until their answer is written (a peer that never reads answers holds
    # its share, not everyone's memory), all streams together and per IP address
    add_unanswered_max_bytes: int = 128 * MiB
    add_unanswered_max_bytes_per_peer: int = 32 * MiB
    max_adds_per_message: int = 100_000  # maxAddsPerMessage: a bigger message ends its stream
    adds_per_loop_turn: int = 4096  # addsPerLoopTurn: a bigger batch is processed in slices
    read_stream_max_in_flight: int = 1024  # requests of one ReadStream being served at once
    # entry bodies of read answers being built or not yet sent, over every carrier, all together
    # and per IP address (answer_budget.py)
    read_answers_max_bytes: int = 128 * MiB
    read_answers_max_bytes_per_peer: int = 32 * MiB
    max_long_polls_per_peer: int = 2500  # maxLongPollsPerIp: parked long polls of one IP address

    def answer_budget(self) -> PeerByteBudget:
        """A budget of read answers not yet sent under these limits (one per servicer)."""
        return PeerByteBudget(self.read_answers_max_bytes, self.read_answers_max_bytes_per_peer)

    def read_batch(self, max_count: int, max_bytes: int) -> tuple[int, int]:
        """A batched read's (count, bytes) bounds, capped by ours; max_bytes 0 = no preference.
        EBADREQ for a count below 1 or negative bytes."""
        if max_count <= 0:
            raise bad_request(f"max_count {max_count} must be positive")
        if max_bytes < 0:
            raise bad_request(f"max_bytes {max_bytes} is negative")
        return (
            min(max_count, self.max_read_batch_count),
            min(max_bytes or self.max_read_batch_bytes, self.max_read_batch_bytes),
        )

    def long_poll_seconds(self, timeout_ms: int) -> float:
        """A long poll's wait in seconds; EBADREQ outside 0..max_long_poll_ms."""
        if not 0 <= timeout_ms <= self.max_long_poll_ms:
            raise bad_request(f"long-poll timeout {timeout_ms} ms is outside 0..{self.max_long_poll_ms}")
        return timeout_ms / 1000.0


def status_code(value: int) -> bookie_pb2.StatusCode:
    """Type a plain status number as the generated enum (the stubs don't accept ints)."""
    return cast("bookie_pb2.StatusCode", value)


def elapsed_ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def failure_of(exc: BaseException, what: str) -> tuple[int, str]:
    """The (status, message) a response carries for ``exc`` raised while serving ``what``."""
    if isinstance(exc, BookieError):
        return exc.status, exc.message
    log.error("%s failed unexpectedly", what, exc_info=exc)
    return bookie_pb2.EIO, f"{what} failed on the bookie: {type(exc).__name__}: {exc}"


RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")


class UnaryHandler(Generic[RequestT, ResponseT]):
    """One unary request type: validate, call the core, build the response, record latency."""

    name = "request"

    def __init__(
        self,
        core: BookieCore,
        stats: RequestStats,
        limits: HandlerLimits,
        long_polls: PeerLongPolls | None = None,
        answer_bytes: PeerByteBudget | None = None,
    ) -> None:
        """``long_polls``: the per-peer count of parked long polls, shared by the handlers that
        park; ``answer_bytes``: the budget of read answers not yet sent (``answer_budget``),
        shared by the handlers that read."""
        self.core = core
        self.stats = stats
        self.limits = limits
        self.long_polls = long_polls or PeerLongPolls(limits.max_long_polls_per_peer, stats.limits)
        self.answer_bytes = answer_bytes or limits.answer_budget()

    def stat_for(self, request: RequestT) -> OpLatency:
        raise NotImplementedError

    async def serve(self, request: RequestT) -> ResponseT:
        """The response for a request; raise BookieError for anything the client did wrong."""
        raise NotImplementedError

    def error_response(self, request: RequestT, status: int, message: str) -> ResponseT:
        raise NotImplementedError

    async def __call__(self, request: RequestT, context: grpc.aio.ServicerContext[Any, Any]) -> ResponseT:
        start = time.perf_counter()
        CURRENT_CALL.set(context)
        try:
            response = await self.serve(request)
        except Exception as exc:  # noqa: BLE001 - the gRPC boundary: every failure becomes a status
            status, message = failure_of(exc, self.name)
            response = self.error_response(request, status, message)
            self.stat_for(request).observe(elapsed_ms(start), False)
            return response
        self.stat_for(request).observe(elapsed_ms(start), getattr(response, "status", EOK) == EOK)
        return response


def lac_for_error(core: BookieCore, ledger_id: int, status: int) -> int:
    """The LAC an error answer to a read carries: readers falling back to another replica still
    learn this bookie's LAC. -1 for a bad request, and whenever looking it up fails (the error
    answer itself must not fail)."""
    if status == bookie_pb2.EBADREQ or ledger_id < 0:
        return -1
    try:
        return core.last_add_confirmed(ledger_id)
    except Exception:  # noqa: BLE001 - see above
        return -1


def require_ledger_id(ledger_id: int) -> None:
    if ledger_id < 0:
        raise BookieError(bookie_pb2.EBADREQ, f"ledger id {ledger_id} is negative")


def require_master_key(master_key: bytes, what: str) -> None:
    # BookKeeper answers a fence without master key with EUA; adds and LAC writes are treated alike.
    if not master_key:
        raise BookieError(bookie_pb2.EUA, f"{what} without a master key")
