"""The bookie's readiness probe and disk-space endpoints (BookKeeper's ``/api/v1/bookie/is_ready``
and ``/api/v1/bookie/info``), over a real HTTP server."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry
from tests.unit.server.test_http_last_log_mark import get

from bookie.api import DiskInfo
from bookie.http import BookieHttpServer


def test_is_ready_follows_the_daemon_and_says_why_not() -> None:
    why_not: list[str | None] = ["starting"]
    server = BookieHttpServer(CollectorRegistry(), readiness=lambda: why_not[-1])
    port = server.start()
    try:
        assert get(port, "/api/v1/bookie/is_ready") == (503, b"bookie is not ready: starting\n")
        why_not.append(None)
        assert get(port, "/api/v1/bookie/is_ready") == (200, b"")
        why_not.append("shutting down")
        assert get(port, "/api/v1/bookie/is_ready") == (503, b"bookie is not ready: shutting down\n")
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
        status, body = get(port, "/api/v1/bookie/info")
        assert status == 200 and json.loads(body) == {"freeSpace": 400, "totalSpace": 1000}
        infos.append(OSError(5, "Input/output error"))
        status, body = get(port, "/api/v1/bookie/info")
        assert status == 500 and "cannot read the disk space" in json.loads(body)["error"]
    finally:
        server.close()


def test_endpoints_the_daemon_did_not_give_are_not_found() -> None:
    server = BookieHttpServer(CollectorRegistry())
    port = server.start()
    try:
        for path in ("is_ready", "info", "gc/suspend_compaction", "state"):
            assert get(port, f"/api/v1/bookie/{path}")[0] == 404
    finally:
        server.close()
