"""The bookie's own endpoints (BookKeeper's paths and answers): ``/api/v1/bookie/last_log_mark``;
on a bookie that collects garbage, ``/api/v1/bookie/gc`` (``PUT`` runs a collection now, ``GET``
tells whether one it asked for is running), ``/api/v1/bookie/gc_details``, ``gc_explain`` (why
each entry log is still there), ``/api/v1/bookie/gc/suspend_compaction`` (``GET``; ``PUT
{"suspendMajor": true, "suspendMinor": true}``) and ``/api/v1/bookie/gc/resume_compaction``
(``PUT {"resumeMajor": true, "resumeMinor": true}``); on a storage bookie, ``GET
/api/v1/bookie/state`` and ``/api/v1/bookie/state/readonly`` (``GET``, and ``PUT {"readOnly":
true|false}``). The daemon also gives ``GET /api/v1/bookie/is_ready`` (200 once the bookie
serves and is registered, 503 before and while it shuts down: a readiness probe), ``GET
/api/v1/bookie/info`` (free and total bytes of the ledger directories' disks), ``GET
/api/v1/config/server_config`` (the effective configuration, key -> value string) and
``/api/v1/bookie/list_disk_file``. An endpoint whose part the bookie does not have is not routed
(404). ``expand_storage`` and ``entry_location_compact`` answer 501 with the reason.

The controls are the bookie's thread-safe ones: they are called from the HTTP server's loop, the
blocking ones from its worker threads, never on the bookie's own loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from bookie.api import DiskInfo, JournalMark
from bookie.http.replies import BadRequest, error_reply, flag, json_object, json_reply, text_reply
from bookie.http.server import Route
from bookie.storage.file_listing import disk_files


class GcControl(Protocol):
    """What the admin endpoint needs of ``bookie.gc.GarbageCollector``; called from HTTP threads."""

    forced_running: bool

    def trigger_threadsafe(self, force_major: bool = True, force_minor: bool = True) -> None: ...

    def details(self) -> dict[str, Any]: ...

    def suspend_by_operator(self, major: bool | None = None, minor: bool | None = None) -> None: ...

    def suspension(self) -> dict[str, str]: ...

    def explain_threadsafe(self, timeout_s: float = 60.0) -> list[dict[str, Any]]: ...


class StateControl(Protocol):
    """What the admin endpoint needs of ``bookie.state_manager.BookieStateManager``."""

    @property
    def read_only(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...

    def set_manual_threadsafe(self, read_only: bool, timeout_s: float = 5.0) -> bool: ...


@dataclass
class BookieControls:
    """What the bookie lends its admin endpoints; None: the bookie has no such part (404)."""

    last_log_marks: Callable[[], Sequence[JournalMark]] | None = None
    gc: GcControl | None = None
    state: StateControl | None = None
    readiness: Callable[[], str | None] | None = None  # why the bookie is not ready (None: it is)
    disk_info: Callable[[], DiskInfo] | None = None
    server_config: Callable[[], Mapping[str, str]] | None = None
    journal_dirs: Sequence[Path] = field(default_factory=tuple)
    ledger_dirs: Sequence[Path] = field(default_factory=tuple)


# BookKeeper's file_type values -> (our kind, BookKeeper's answer key)
_DISK_FILE_TYPES = {
    "journal": ("journal_files", "journal files"),
    "entrylog": ("entry_logs", "entrylog files"),
    "index": ("index_dirs", "index files"),
}

_REFUSED_CONFIG_CHANGE = ("settings are read once at start: change the configuration file or BK_ variable"
                          " and restart the bookie")
_NO_EXPAND = ("the ledger and journal directories are fixed at start (their cookie names them): add a"
              " directory to the configuration and restart the bookie")
_NO_LOCATION_COMPACT = ("the entry location index is compacted by RocksDB in the background; there is no"
                        " manual compaction of it here")


def bookie_routes(controls: BookieControls) -> list[Route]:
    """The route table of the bookie's own endpoints."""
    c = controls
    routes = [
        Route("PUT", "/api/v1/bookie/expand_storage", _not_implemented(_NO_EXPAND)),
        Route("GET", "/api/v1/bookie/entry_location_compact", _not_implemented(_NO_LOCATION_COMPACT)),
        Route("PUT", "/api/v1/bookie/entry_location_compact", _not_implemented(_NO_LOCATION_COMPACT)),
    ]
    if c.journal_dirs or c.ledger_dirs:
        routes.append(Route("GET", "/api/v1/bookie/list_disk_file", _list_disk_file(c)))
    if c.last_log_marks is not None:
        marks = c.last_log_marks
        routes.append(Route("GET", "/api/v1/bookie/last_log_mark", _answer(lambda: _marks_json(marks()))))
    if c.readiness is not None:
        routes.append(Route("GET", "/api/v1/bookie/is_ready", _is_ready(c.readiness)))
    if c.server_config is not None:
        config = c.server_config
        routes += [
            Route("GET", "/api/v1/config/server_config", _answer(lambda: dict(config()))),
            # BookKeeper sets a property in memory, seen by whatever reads it later; here every
            # setting is read once at start, so a change would be reported and not take effect
            Route("PUT", "/api/v1/config/server_config", _not_implemented(_REFUSED_CONFIG_CHANGE)),
        ]
    if c.disk_info is not None:
        routes.append(Route("GET", "/api/v1/bookie/info", _info(c.disk_info)))
    if c.gc is not None:
        routes += _gc_routes(c.gc)
    if c.state is not None:
        routes += _state_routes(c.state)
    return routes


def _answer(value: Callable[[], object], in_thread: bool = False) -> Callable[[web.Request], Any]:
    """A GET handler answering ``value()`` as JSON (called in a worker thread if it may block)."""

    async def handle(request: web.Request) -> web.Response:
        return json_reply(await asyncio.to_thread(value) if in_thread else value())

    return handle


def _not_implemented(why: str) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        return error_reply(501, why)

    return handle


def _is_ready(readiness: Callable[[], str | None]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        why_not = readiness()
        if why_not is None:
            return text_reply("")
        return text_reply(f"bookie is not ready: {why_not}\n", 503)

    return handle


def _info(disk_info: Callable[[], DiskInfo]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        try:
            info = await asyncio.to_thread(disk_info)
        except OSError as exc:
            return error_reply(500, f"cannot read the disk space: {exc}")
        return json_reply({"freeSpace": info.free_bytes, "totalSpace": info.total_bytes})

    return handle


def _list_disk_file(c: BookieControls) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        wanted = request.query.get("file_type")
        if wanted is not None and wanted not in _DISK_FILE_TYPES:
            raise BadRequest(f"file_type must be one of {', '.join(_DISK_FILE_TYPES)}, got {wanted!r}")
        types = [wanted] if wanted is not None else list(_DISK_FILE_TYPES)
        kinds = [_DISK_FILE_TYPES[t][0] for t in types]
        listing = await asyncio.to_thread(disk_files, c.journal_dirs, c.ledger_dirs, kinds)
        # BookKeeper's answer: the names of each kind in one space-separated string
        pairs = [_DISK_FILE_TYPES[t] for t in types]
        return json_reply({key: " ".join(f["path"] for f in listing[kind]) for kind, key in pairs})

    return handle


def _gc_routes(gc: GcControl) -> list[Route]:
    async def is_in_force_gc(request: web.Request) -> web.Response:
        return json_reply({"is_in_force_gc": str(gc.forced_running).lower()})  # BookKeeper's string

    async def trigger(request: web.Request) -> web.Response:
        body = await request.read()
        major = minor = True
        if body.strip():
            value = await json_object(request, '{"forceMajor": true, "forceMinor": false}')
            major, minor = flag(value.get("forceMajor"), "forceMajor", True), flag(
                value.get("forceMinor"), "forceMinor", True)
        gc.trigger_threadsafe(major, minor)
        return json_reply({"message": "garbage collection triggered"})

    def suspension(verb: str, suspend: bool) -> Callable[[web.Request], Any]:
        example = f'{{"{verb}Major": true, "{verb}Minor": true}}'

        async def handle(request: web.Request) -> web.Response:
            value = await json_object(request, example)
            major = flag(value.get(f"{verb}Major"), f"{verb}Major", False)
            minor = flag(value.get(f"{verb}Minor"), f"{verb}Minor", False)
            if not (major or minor):  # it would do nothing
                raise BadRequest(f"nothing to {verb}: expected a body like {example}")
            gc.suspend_by_operator(suspend if major else None, suspend if minor else None)
            return json_reply(gc.suspension())

        return handle

    return [
        Route("GET", "/api/v1/bookie/gc", is_in_force_gc),
        Route("PUT", "/api/v1/bookie/gc", trigger),
        Route("GET", "/api/v1/bookie/gc_details", _answer(lambda: [gc.details()])),
        Route("GET", "/api/v1/bookie/gc_explain", _answer(gc.explain_threadsafe, in_thread=True)),
        Route("GET", "/api/v1/bookie/gc/suspend_compaction", _answer(gc.suspension)),
        Route("PUT", "/api/v1/bookie/gc/suspend_compaction", suspension("suspend", True)),
        Route("PUT", "/api/v1/bookie/gc/resume_compaction", suspension("resume", False)),
    ]


def _state_routes(state: StateControl) -> list[Route]:
    async def set_read_only(request: web.Request) -> web.Response:
        wanted = flag((await json_object(request, '{"readOnly": true}')).get("readOnly"), "readOnly")
        try:
            read_only = await asyncio.to_thread(state.set_manual_threadsafe, wanted)
        except ValueError as exc:  # StateRefused
            raise BadRequest(str(exc)) from None
        except (TimeoutError, RuntimeError):  # a busy event loop, or one already closed
            return error_reply(503, "the bookie's event loop did not take the change; try again")
        return json_reply({"readOnly": read_only})

    return [
        Route("GET", "/api/v1/bookie/state", _answer(state.describe)),
        Route("GET", "/api/v1/bookie/state/readonly", _answer(lambda: {"readOnly": state.read_only})),
        Route("PUT", "/api/v1/bookie/state/readonly", set_read_only),
    ]


def _marks_json(marks: Sequence[JournalMark]) -> dict[str, Any]:
    """Each journal's mark under ``journals`` (BookKeeper's endpoint also answers one per journal);
    ``journal_id`` and ``offset`` at the top are the first journal's, the whole answer of a bookie
    with one journal dir."""
    first = marks[0].mark
    journals = [
        {"journal_dir": str(m.journal_dir), "journal_id": m.mark.journal_id, "offset": m.mark.offset}
        for m in marks
    ]
    return {"journal_id": first.journal_id, "offset": first.offset, "journals": journals}


__all__ = ["BookieControls", "GcControl", "StateControl", "bookie_routes"]
