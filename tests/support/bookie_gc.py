"""Garbage collection of a real bookie process driven through its HTTP admin API, as an operator
does it (``PUT /api/v1/bookie/gc``, then ``GET /api/v1/bookie/gc_details`` until it is done)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

from tests.support.admin_http import get_ok_json
from tests.support.bookies import BookieProcess

GC_DETAILS = "/api/v1/bookie/gc_details"


def trigger_gc(bookie: BookieProcess, body: bytes | None) -> Any:
    """Ask for a collection (``body``: BookKeeper's ``forceMajor``/``forceMinor`` JSON, or none for
    a forced major compaction); an error status raises ``urllib.error.HTTPError``."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{bookie.http_port}/api/v1/bookie/gc", data=body, method="PUT"
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


async def gc_runs_finished(bookie: BookieProcess, runs: int) -> dict[str, Any]:
    """The GC details once ``runs`` collections have finished and none is running (30 s guard)."""
    assert bookie.http_port is not None, f"{bookie} serves no HTTP admin API"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (details,) = await asyncio.to_thread(get_ok_json, bookie.http_port, GC_DETAILS)
        if details["gcCounter"] >= runs and not details["gcRunning"]:
            return dict(details)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{bookie}: no finished garbage collection within 30 s: {details}")
