"""The gRPC AddEntries call as the add stream uses it: nothing is written before the bookie took
the call (``bkproto.grpc_add_stream``), so a refused call reports the bookie's reason."""

from __future__ import annotations

from typing import Any

import grpc.aio

from bkproto.grpc_add_stream import ACCEPTED


class GrpcAddCall:
    """A gRPC AddEntries call (serialized requests) whose first write waits for the bookie's
    :data:`~bkproto.grpc_add_stream.ACCEPTED` initial metadata. A call the bookie ended instead
    fails that write with the call's status: the bookie's own, since no write raced it."""

    __slots__ = ("_accepted", "_call")

    def __init__(self, call: Any) -> None:
        self._call = call
        self._accepted = False

    async def write(self, message: bytes) -> None:
        if not self._accepted:
            await self._wait_accepted()
        await self._call.write(message)

    async def _wait_accepted(self) -> None:
        call = self._call
        metadata = await call.initial_metadata()
        if any((key, value) == ACCEPTED for key, value in metadata or ()):
            self._accepted = True
            return
        # The bookie ended the call instead of taking it: raise its status.
        raise grpc.aio.AioRpcError(
            await call.code(),
            await call.initial_metadata(),
            await call.trailing_metadata(),
            await call.details(),
            await call.debug_error_string(),
        )

    async def read(self) -> Any:
        return await self._call.read()

    async def done_writing(self) -> None:
        await self._call.done_writing()

    def cancel(self) -> bool:
        return bool(self._call.cancel())
