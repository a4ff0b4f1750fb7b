"""The gRPC add stream writes nothing before the bookie took the call, so a call the bookie refuses
reports the bookie's reason: over a real loopback gRPC server with TLS and tokens, the bookie's
service and guard, and an in-memory core.

Without the wait, a write racing the refusal fails in grpc.aio with an internal error ("Failed
execute_batch") that grpc.aio also makes the call's status: a refused writer then read as a
bookie to replace, and ``pybk bench bookie`` printed grpc's error instead of the bookie's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from prometheus_client import CollectorRegistry
from tests.support.add_requests import MASTER_KEY, add_request
from tests.support.fake_bookie_core import FakeBookieCore
from tests.support.security import SecurityMaterial

from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkclient.grpc_add_call import GrpcAddCall
from bkproto.errors import UnauthorizedAccessError
from bkproto.v1 import bookie_pb2
from bookie.config import load_config
from bookie.security import BookieSecurity
from bookie.service import BookieService
from bookie.stats import RequestStats

REFUSAL = "EUA: reader lacks the write right"


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[SecurityMaterial, str]]:
    material = SecurityMaterial.create(tmp_path / "pki")
    conf = {"zkServers": "none", **material.bookie_conf(mtls=False)}
    registry = CollectorRegistry()
    security = BookieSecurity(load_config(None, {}, conf).security, registry)
    service = BookieService(FakeBookieCore(), RequestStats(registry), "127.0.0.1", 0, security=security)
    await service.start()
    yield material, f"127.0.0.1:{service.port}"
    await service.stop(0)


def add_entries(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamMultiCallable:
    return channel.stream_stream(
        "/bkproto.v1.Bookie/AddEntries",
        request_serializer=None,  # the requests go serialized, as the client sends them
        response_deserializer=bookie_pb2.AddEntriesResponse.FromString,
    )


def one_add(entry_id: int) -> bytes:
    return bookie_pb2.AddEntriesRequest(adds=[add_request(1, entry_id)]).SerializeToString()


async def test_a_refused_call_fails_its_first_write_with_the_bookies_reason(
    secured: tuple[SecurityMaterial, str],
) -> None:
    # written at once after the call opens, which is when the race is likeliest (a plain
    # grpc.aio call lost it in nearly every attempt here)
    material, address = secured
    credentials = material.client_token("reader").grpc_credentials()
    async with grpc.aio.secure_channel(address, credentials) as channel:
        method = add_entries(channel)
        for _ in range(30):
            call = GrpcAddCall(method())  # type: ignore[call-arg]
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call.write(one_add(0))
            assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert raised.value.details() == REFUSAL


async def test_a_taken_call_carries_adds_and_answers(secured: tuple[SecurityMaterial, str]) -> None:
    material, address = secured
    credentials = material.client_token("writer").grpc_credentials()
    async with grpc.aio.secure_channel(address, credentials) as channel:
        call = GrpcAddCall(add_entries(channel)())  # type: ignore[call-arg]
        for entry_id in range(3):
            await call.write(one_add(entry_id))
            answer = await call.read()
            assert [(r.status, r.entry_id) for r in answer.results] == [(bookie_pb2.EOK, entry_id)]
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF  # type: ignore[attr-defined]


async def test_a_writer_whose_token_is_refused_fails_its_adds_as_unauthorized(
    secured: tuple[SecurityMaterial, str],
) -> None:
    """Fatal to the writer (UnauthorizedAccessError), not a bookie to replace."""
    material, address = secured
    options = BookieClientOptions(security=material.client_token("reader"), use_add_port=False)
    client = BookieClient(address, address, options)
    try:
        for entry_id in range(5):
            with pytest.raises(UnauthorizedAccessError, match="reader lacks the write right"):
                await client.add(1, entry_id, MASTER_KEY, b"x" * 64)
    finally:
        await client.close()
