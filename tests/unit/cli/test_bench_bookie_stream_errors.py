"""`pybk bench bookie` over gRPC: a stream the bookie ended reports the bookie's reason."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from pybk.bench.bookie_adds import _write


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _EndedStream:
    """A gRPC AddEntries call the bookie ended with PERMISSION_DENIED: as grpc.aio behaves when
    the status arrives while a write is under way, the write fails with an internal error."""

    async def write(self, message: bytes) -> None:
        raise _rpc_error(grpc.StatusCode.INTERNAL, 'Failed "execute_batch"')

    async def read(self) -> Any:
        raise _rpc_error(grpc.StatusCode.PERMISSION_DENIED, "EUA: reader lacks the write right")


async def test_a_write_to_an_ended_stream_raises_the_streams_status() -> None:
    call = _EndedStream()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _write(call, b"message", call.read)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "reader lacks the write right" in str(raised.value.details())


async def test_a_failed_write_whose_stream_has_no_status_raises_its_own_error() -> None:
    call = _EndedStream()

    async def no_status() -> None:
        return None

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _write(call, b"message", no_status)
    assert raised.value.code() == grpc.StatusCode.INTERNAL
