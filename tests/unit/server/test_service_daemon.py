"""BookieDaemon assembly and lifecycle with an in-memory core: ports, HTTP admin, shutdown order."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import urllib.error
import urllib.request

import grpc.aio
import pytest
from tests.support.fake_bookie_core import FakeBookieCore

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bookie import main as bookie_main
from bookie.config import BookieConfig, ConfigError, load_config


class ManagedFakeCore(FakeBookieCore):
    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    async def start(self) -> None:
        self.events.append("core start")

    async def close(self) -> None:
        self.events.append("core close")


def config(**overrides: str) -> BookieConfig:
    base = {"zkServers": "none", "bookiePort": "0", "bindAddress": "127.0.0.1"}
    return load_config(None, {}, base | overrides)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_daemon_serves_grpc_and_http_then_closes_in_order(caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    daemon = bookie_main.BookieDaemon(
        config(httpServerEnabled="true", httpServerPort="0"), lambda c, r: ManagedFakeCore(events)
    )
    caplog.set_level("INFO", logger="bookie.main")
    await daemon.start()
    assert daemon.config.port > 0 and daemon.http is not None
    assert f"bookie 127.0.0.1:{daemon.config.port} ready: grpc 127.0.0.1:{daemon.config.port}" in caplog.text
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.config.port}") as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        body = HEADER.pack(1, 0, -1, 1) + b"x"
        reply = await stub.AddEntry(
            bookie_pb2.AddRequest(ledger_id=1, entry_id=0, master_key=b"k", body=body)
        )
        assert reply.status == bookie_pb2.EOK
    http_port = daemon.http.port
    assert await asyncio.to_thread(http_get, http_port, "/heartbeat") == (200, "OK\n")
    status, metrics = await asyncio.to_thread(http_get, http_port, "/metrics")
    assert status == 200 and 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 1.0' in metrics
    assert (await asyncio.to_thread(http_get, http_port, "/nope"))[0] == 404
    await daemon.close()
    await daemon.close()  # idempotent
    assert events == ["core start", "core close"]
    with pytest.raises(OSError):
        await asyncio.to_thread(http_get, http_port, "/heartbeat")


async def test_cookie_is_checked_before_storage_opens_and_registration_follows_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replaced disk must be refused before storage replays into it, and clients must only see a
    bookie that already serves: bind, cookie check, core start, serve, register."""
    events: list[str] = []

    class FakeRegistration:
        def __init__(self, cfg: BookieConfig) -> None:
            events.append(f"presence for {cfg.bookie_id} with {cfg.zk_servers}")

        async def start(self) -> None:
            events.append("cookie checked")

        async def register(self, http_port: int | None, add_port: int | None = None) -> None:
            events.append(f"registered http={http_port} add={add_port is not None and add_port > 0}")

        async def close(self) -> None:
            events.append("unregistered")

    monkeypatch.setattr(bookie_main, "registration_factory", FakeRegistration)
    daemon = bookie_main.BookieDaemon(config(zkServers="zk:2181"), lambda c, r: ManagedFakeCore(events))
    await daemon.start()
    await daemon.close()
    port = daemon.config.port
    assert port > 0
    assert events == [
        f"presence for 127.0.0.1:{port} with zk:2181",
        "cookie checked",
        "core start",
        "registered http=None add=True",
        "unregistered",
        "core close",
    ]


async def test_refused_cookie_leaves_storage_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    class RefusingRegistration:
        def __init__(self, cfg: BookieConfig) -> None:
            pass

        async def start(self) -> None:
            raise RuntimeError("cookie mismatch")

        async def register(self, http_port: int | None, add_port: int | None = None) -> None:
            raise AssertionError("must not register")

        async def close(self) -> None:
            events.append("unregistered")

    monkeypatch.setattr(bookie_main, "registration_factory", RefusingRegistration)
    daemon = bookie_main.BookieDaemon(config(zkServers="zk:2181"), lambda c, r: ManagedFakeCore(events))
    with pytest.raises(RuntimeError, match="cookie mismatch"):
        await daemon.start()
    await daemon.close()
    assert "core start" not in events


async def test_daemon_process_freezes_its_startup_heap() -> None:
    """The daemon's own process (``run_daemon``) freezes what start-up allocated, so the oldest-
    generation collection does not rescan it under load; an embedded daemon leaves the host
    process's collector alone."""
    gc.unfreeze()
    embedded = bookie_main.BookieDaemon(config(), lambda c, r: ManagedFakeCore([]))
    await embedded.start()
    try:
        assert gc.get_freeze_count() == 0
    finally:
        await embedded.close()
    daemon = bookie_main.BookieDaemon(config(), lambda c, r: ManagedFakeCore([]), freeze_startup_heap=True)
    await daemon.start()
    try:
        assert gc.get_freeze_count() > 0
        assert len(gc.get_objects()) < gc.get_freeze_count()  # what is left to scan is the new part
    finally:
        await daemon.close()
        gc.unfreeze()


def test_zookeeper_without_registration_hook_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--zk none"):
        bookie_main.BookieDaemon(config(zkServers="zk:2181"), lambda c, r: ManagedFakeCore([]))


async def test_sigterm_stops_run_daemon_with_exit_code_zero() -> None:
    events: list[str] = []
    started = asyncio.Event()

    class SignallingCore(ManagedFakeCore):
        async def start(self) -> None:
            await super().start()
            started.set()

    gc.unfreeze()
    daemon_task = asyncio.ensure_future(bookie_main.run_daemon(config(), lambda c, r: SignallingCore(events)))
    await started.wait()
    os.kill(os.getpid(), signal.SIGTERM)  # handled by the daemon's loop signal handler
    assert await asyncio.wait_for(daemon_task, 30) == 0
    assert events == ["core start", "core close"]
    assert gc.get_freeze_count() > 0  # the daemon process froze its start-up heap
    gc.unfreeze()
