"""gRPC failures as BookKeeper errors, for the unary calls and the streams of a bookie connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio

from bkproto.errors import BKError, BookieUnavailableError, TimeoutError, UnauthorizedAccessError


def translate_rpc_error(bookie_id: str, exc: grpc.aio.AioRpcError) -> BKError:
    """A gRPC failure as a BookKeeper error: deadline → TimeoutError, a refused identity or right
    → UnauthorizedAccessError (EUA), anything else means the bookie could not be used →
    BookieUnavailableError."""
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return TimeoutError(f"bookie {bookie_id}: request timed out")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return UnauthorizedAccessError(f"bookie {bookie_id}: {exc.details() or code.name}")
    return BookieUnavailableError(f"bookie {bookie_id}: {code.name} {exc.details() or ''}".rstrip())


async def run_stream_loop(
    loop: Callable[[], Awaitable[None]], fail: Callable[[BKError], None], bookie_id: str, stream: str
) -> None:
    """Run a stream's send or receive loop; whatever breaks it fails the stream (``fail``), so
    the requests waiting on it fail instead of hanging. Cancellation is the normal way out."""
    try:
        await loop()
    except asyncio.CancelledError:
        raise
    except grpc.aio.AioRpcError as exc:
        fail(translate_rpc_error(bookie_id, exc))
    except Exception as exc:  # noqa: BLE001 - whatever broke the stream, its requests must fail, not hang
        fail(BookieUnavailableError(f"bookie {bookie_id}: {stream} stream broke: {exc!r}"))
