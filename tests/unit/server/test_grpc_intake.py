"""The gRPC intake's per-IP connection count and slow-request limits, on a fake call context."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from bookie.grpc_intake import GrpcIntake
from bookie.limits import LimitStats, ListenerLimits


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class FakeCall:
    def __init__(self, peer: str, request: asyncio.Future[Any]) -> None:
        self._peer = peer
        self._request = request

    def peer(self) -> str:
        return self._peer

    async def read(self) -> Any:
        return await self._request

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


async def echo(request: Any, context: Any) -> Any:
    return request


def intake(**limits: Any) -> GrpcIntake:
    return GrpcIntake(ListenerLimits(**limits), LimitStats(None), slow_after_s=0.01)


async def test_calls_on_a_connection_beyond_the_per_ip_limit_are_refused() -> None:
    door = intake(max_connections_per_peer=2)
    handler = door.unary(echo)
    waiting = asyncio.get_running_loop().create_future()
    held = [asyncio.create_task(handler(None, FakeCall(f"ipv4:10.0.0.1:{port}", waiting))) for port in (1, 2)]
    await asyncio.sleep(0)
    assert door.connections_with_calls("10.0.0.1") == 2
    # a second call on a connection already counted is fine; a third connection is not
    again = asyncio.create_task(handler(None, FakeCall("ipv4:10.0.0.1:1", waiting)))
    with pytest.raises(Aborted) as refused:
        await handler(None, FakeCall("ipv4:10.0.0.1:3", waiting))
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "maxConnectionsPerIp" in str(refused.value)
    # another IP has its own count
    done = asyncio.get_running_loop().create_future()
    done.set_result("other")
    assert await handler(None, FakeCall("ipv4:10.0.0.2:1", done)) == "other"
    waiting.set_result("ok")
    assert await asyncio.gather(*held, again) == ["ok", "ok", "ok"]
    assert door.connections_with_calls("10.0.0.1") == 0


async def test_slow_requests_beyond_the_per_ip_share_end_and_the_rest_time_out() -> None:
    door = intake(max_slow_requests_per_peer=1, max_slow_requests=2, frame_timeout_s=0.2)
    handler = door.unary(echo)
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(handler(None, FakeCall("ipv4:10.0.0.1:1", loop.create_future())))
    await asyncio.sleep(0.05)  # past slow_after_s: it waits as the peer's one slow call
    with pytest.raises(Aborted) as refused:
        await handler(None, FakeCall("ipv4:10.0.0.1:1", loop.create_future()))
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "maxSlowRequestsPerIp" in str(refused.value)
    with pytest.raises(Aborted) as timed_out:
        await first
    assert timed_out.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert door.slow_total == 0
