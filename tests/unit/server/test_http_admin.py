"""The bookie's readiness probe and disk-space endpoints (BookKeeper's ``/api/v1/bookie/is_ready``
and ``/api/v1/bookie/info``), over a real HTTP server."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from tests.support.admin_http import status_and_body

from bookie.api import DiskInfo
from bookie.http import BookieHttpServer


def test_is_ready_follows_the_daemon_and_says_why_not() -> None:
    why_not: list[str | None] = ["starting"]
    server = BookieHttpServer(CollectorRegistry(), readiness=lambda: why_not[-1])
    port = server.start()
    try:
        assert status_and_body(port, "/api/v1/bookie/is_ready") == (503, b"bookie is not ready: starting\n")
        why_not.append(None)
        assert status_and_body(port, "/api/v1/bookie/is_ready") == (200, b"")
        why_not.append("shutting down")
        stopping = status_and_body(port, "/api/v1/bookie/is_ready")
        assert stopping == (503, b"bookie is not ready: shutting down\n")
    finally:
        server.close()


def test_info_gives_the_disk_space_and_a_clear_error_when_it_cannot() -> None:
    infos: list[DiskInfo | OSError] = [DiskInfo(total_bytes=1000, free_bytes=400)]

    def disk_info() -> DiskInfo:
        info = infos[-1]
        if isinstance(info, OSError):
            raise info
        return info

    server = BookieHttpServer(CollectorRegistry(), disk_info=disk_info)
    port = server.start()
    try:
        status, body = status_and_body(port, "/api/v1/bookie/info")
        assert status == 200 and json.loads(body) == {"freeSpace": 400, "totalSpace": 1000}
        infos.append(OSError(5, "Input/output error"))
        status, body = status_and_body(port, "/api/v1/bookie/info")
        assert status == 500 and "cannot read the disk space" in json.loads(body)["error"]
    finally:
        server.close()


def test_endpoints_the_daemon_did_not_give_are_not_found() -> None:
    server = BookieHttpServer(CollectorRegistry())
    port = server.start()
    try:
        for path in ("is_ready", "info", "gc/suspend_compaction", "state"):
            assert status_and_body(port, f"/api/v1/bookie/{path}")[0] == 404
    finally:
        server.close()


async def test_requests_are_served_while_the_bookies_event_loop_is_blocked() -> None:
    """The admin server has its own loop: a request is answered while the loop that started it
    (the bookie's, serving the data path) is busy, and no handler runs on that loop."""
    bookie_loop = asyncio.get_running_loop()
    handler_loops: list[asyncio.AbstractEventLoop] = []

    def readiness() -> str | None:
        handler_loops.append(asyncio.get_running_loop())
        return None

    server = BookieHttpServer(CollectorRegistry(), readiness=readiness)
    port = await asyncio.to_thread(server.start)
    try:
        answers: list[tuple[int, bytes]] = []
        caller = threading.Thread(
            target=lambda: answers.append(status_and_body(port, "/api/v1/bookie/is_ready"))
        )
        caller.start()
        caller.join(timeout=60)  # blocks the bookie's loop for the whole request
        assert answers == [(200, b"")]
        assert handler_loops and all(loop is not bookie_loop for loop in handler_loops)
    finally:
        await asyncio.to_thread(server.close)


def test_unknown_paths_wrong_methods_and_large_bodies_get_json_errors() -> None:
    server = BookieHttpServer(CollectorRegistry(), readiness=lambda: None)
    port = server.start()
    try:
        status, body = status_and_body(port, "/api/v1/nothing")
        assert status == 404 and json.loads(body) == {"error": "no such endpoint: /api/v1/nothing"}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/bookie/is_ready", method="PUT")
        with pytest.raises(urllib.error.HTTPError) as wrong:
            urllib.request.urlopen(request, timeout=10)
        assert wrong.value.code == 405 and wrong.value.headers["Allow"] == "GET"
        assert "PUT is not allowed" in json.loads(wrong.value.read())["error"]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/bookie/is_ready", method="GET",
                                         data=b"x" * 100_000)
        with pytest.raises(urllib.error.HTTPError) as large:
            urllib.request.urlopen(request, timeout=10)
        assert large.value.code == 413 and "larger than 65536" in json.loads(large.value.read())["error"]
    finally:
        server.close()
