"""The bookie's HTTP admin endpoint: ``GET /heartbeat`` -> ``OK`` and ``GET /metrics`` -> Prometheus
text of the bookie's own registry (BookKeeper's ``/heartbeat`` and ``/metrics``), plus BookKeeper's
``/api/v1/bookie/last_log_mark``; on a bookie that collects garbage, ``/api/v1/bookie/gc``
(``PUT`` runs a collection now, ``GET`` tells whether one it asked for is running) and
``/api/v1/bookie/gc_details``, and ``/api/v1/bookie/gc/suspend_compaction`` (``GET``; ``PUT
{"suspendMajor": true, "suspendMinor": true}``) and ``/api/v1/bookie/gc/resume_compaction``
(``PUT {"resumeMajor": true, "resumeMinor": true}``); on a storage bookie, ``GET /api/v1/bookie/state`` and
``/api/v1/bookie/state/readonly`` (``GET``, and ``PUT {"readOnly": true|false}``). The daemon
also gives ``GET /api/v1/bookie/is_ready`` (200 once the bookie serves and is registered, 503
before and while it shuts down: a readiness probe) and ``GET /api/v1/bookie/info`` (free and
total bytes of the ledger directories' disks), and ``GET /api/v1/config/server_config`` (the
effective configuration as BookKeeper answers it, a JSON object of key -> value string).

With TLS (``bookie.security``) it speaks HTTPS, the handshake done on the request's own thread;
with authentication on, every request needs an identity (client certificate, or ``Authorization:
Bearer <token>``; 401 otherwise) and the state-changing ``PUT`` calls the admin right (403).

It runs a small threaded ``http.server`` on its own daemon threads: metric collection takes the
metrics' own locks and never touches the event loop, so a slow scraper cannot stall requests.
Threads are bounded: at most ``httpServerMaxConnections`` requests are served at once, a quarter
of them from one IP address, and a connection beyond that gets a 503 at once, from the accepting
thread, without a thread of its own. A client
must send its whole request within ``request_timeout_s`` (a client dribbling a byte at a time is
cut off, not waited for), and every socket operation times out as well.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from bkproto import security as wire
from bookie.api import DiskInfo, JournalMark
from bookie.limits import ConnectionCounter, LimitStats, ListenerLimits, peer_host
from bookie.security import BookieSecurity, Right

log = logging.getLogger(__name__)


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


LISTENER = "http"  # the ``listener`` label of the limit metrics
_BUSY_TEXT = b"too many admin requests at once\n"
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (
    len(_BUSY_TEXT), _BUSY_TEXT
)


class _AdminServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    registry: CollectorRegistry
    limit_stats: LimitStats | None = None
    request_timeout_s = 10.0
    # ``pybk shell lastmark``: reads immutable LogMarks (the flush replaces them whole), safe
    # from this thread.
    last_log_marks: Callable[[], Sequence[JournalMark]] | None = None
    gc: GcControl | None = None
    state: StateControl | None = None
    readiness: Callable[[], str | None] | None = None  # why the bookie is not ready (None: it is)
    disk_info: Callable[[], DiskInfo] | None = None
    security: BookieSecurity | None = None
    server_config: Callable[[], Mapping[str, str]] | None = None  # GET /api/v1/config/server_config

    def limit_hit(self, limit: str) -> None:
        if self.limit_stats is not None:
            self.limit_stats.hit(LISTENER, limit)

    def setup_limits(self, limits: ListenerLimits, limit_stats: LimitStats | None) -> None:
        self.limit_stats = limit_stats
        self.request_timeout_s = limits.http_request_timeout_s
        self._connections = ConnectionCounter(
            limits.http_max_connections, max(1, limits.http_max_connections // 4)
        )
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve in a thread of its own if there is room, else answer 503 from this thread."""
        host = peer_host(client_address)
        with self._connections_lock:
            refused = self._connections.admit(host)
        if refused is not None:
            self.limit_hit(refused)
            try:
                request.setblocking(False)  # the accepting thread must never wait on a client
                request.send(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(host)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(peer_host(client_address))

    def _release(self, host: str) -> None:
        with self._connections_lock:
            self._connections.release(host)


class _AdminRequestHandler(BaseHTTPRequestHandler):
    server: _AdminServer
    timeout = 10  # seconds any one socket operation may take: a stalled client frees its thread

    def setup(self) -> None:
        super().setup()
        # Cut a client that has not sent its whole request in time, however it trickles it in.
        self._deadline = threading.Timer(self.server.request_timeout_s, self._cut_off)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def _cut_off(self) -> None:
        self.server.limit_hit("request_timeout")
        log.debug("http: cutting off %s: no whole request within %g s", self.client_address,
                  self.server.request_timeout_s)
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()  # here, not in the accepting thread: a slow peer
            except (OSError, ssl.SSLError) as exc:  # holds only its own thread
                log.debug("http %s: TLS handshake failed: %s", self.client_address[0], exc)
                return
        super().handle()

    def _allowed(self, right: Right) -> bool:
        """Whether the caller may go on; otherwise the refusal is sent (401 or 403, EUA)."""
        security = self.server.security
        if security is None or not security.guard.required:
            return True
        peercert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        token = wire.token_from_header(self.headers.get("Authorization"))
        identity = security.guard.identify(wire.common_name(peercert), token)
        why = security.guard.refusal("http", identity, right)
        if why is None:
            return True
        self._json(401 if identity is None else 403, {"error": f"EUA: {why}"})
        return False

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._allowed(Right.READ):
            return
        if path == "/heartbeat":
            self._reply(200, b"OK\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/api/v1/bookie/last_log_mark" and self.server.last_log_marks is not None:
            self._reply(200, _marks_json(self.server.last_log_marks()), "application/json")
        elif path == "/api/v1/bookie/is_ready" and self.server.readiness is not None:
            why_not = self.server.readiness()
            if why_not is None:
                self._reply(200, b"", "text/plain; charset=utf-8")
            else:
                self._reply(503, f"bookie is not ready: {why_not}\n".encode(), "text/plain; charset=utf-8")
        elif path == "/api/v1/config/server_config" and self.server.server_config is not None:
            self._json(200, dict(self.server.server_config()))
        elif path == "/api/v1/bookie/info" and self.server.disk_info is not None:
            try:
                info = self.server.disk_info()
            except OSError as exc:
                self._json(500, {"error": f"cannot read the disk space: {exc}"})
                return
            self._json(200, {"freeSpace": info.free_bytes, "totalSpace": info.total_bytes})
        elif path == "/api/v1/bookie/gc" and self.server.gc is not None:
            # BookKeeper's answer, a string "true"/"false"
            self._json(200, {"is_in_force_gc": str(self.server.gc.forced_running).lower()})
        elif path == "/api/v1/bookie/gc_details" and self.server.gc is not None:
            self._json(200, [self.server.gc.details()])
        elif path == "/api/v1/bookie/gc_explain" and self.server.gc is not None:
            self._json(200, self.server.gc.explain_threadsafe())  # why each entry log is still there
        elif path == "/api/v1/bookie/gc/suspend_compaction" and self.server.gc is not None:
            self._json(200, self.server.gc.suspension())
        elif path == "/api/v1/bookie/state" and self.server.state is not None:
            self._json(200, self.server.state.describe())
        elif path == "/api/v1/bookie/state/readonly" and self.server.state is not None:
            self._json(200, {"readOnly": self.server.state.read_only})
        else:
            self._not_found(path)

    def do_PUT(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._allowed(Right.ADMIN):
            return
        if path == "/api/v1/config/server_config" and self.server.server_config is not None:
            # BookKeeper sets a property in memory, seen by whatever reads it later; here every
            # setting is read once at start, so a change would be reported and not take effect
            self._json(501, {"error": "settings are read once at start: change the configuration"
                                      " file or BK_ variable and restart the bookie"})
        elif path == "/api/v1/bookie/gc" and self.server.gc is not None:
            try:
                flags = _gc_flags(self._body())
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
                return
            self.server.gc.trigger_threadsafe(*flags)
            self._json(200, {"message": "garbage collection triggered"})
        elif path in _SUSPENSIONS and self.server.gc is not None:
            verb, suspend = _SUSPENSIONS[path]
            try:
                major, minor = _suspension_flags(self._body(), verb)
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
                return
            self.server.gc.suspend_by_operator(suspend if major else None, suspend if minor else None)
            self._json(200, self.server.gc.suspension())
        elif path == "/api/v1/bookie/state/readonly" and self.server.state is not None:
            try:
                read_only = self.server.state.set_manual_threadsafe(_read_only_flag(self._body()))
            except ValueError as exc:  # a bad body, or StateRefused
                self._json(400, {"error": str(exc)})
                return
            except (TimeoutError, RuntimeError):  # a busy event loop, or one already closed
                self._json(503, {"error": "the bookie's event loop did not take the change; try again"})
                return
            self._json(200, {"readOnly": read_only})
        else:
            self._not_found(path)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ValueError("bad Content-Length") from None
        if length > 65536:
            raise ValueError(f"body of {length} bytes is too large")
        return self.rfile.read(length) if length > 0 else b""

    def _not_found(self, path: str) -> None:
        self._reply(404, f"no such endpoint: {path}\n".encode(), "text/plain; charset=utf-8")

    def _json(self, code: int, value: object) -> None:
        self._reply(code, json.dumps(value).encode(), "application/json")

    def _reply(self, code: int, body: bytes, content_type: str) -> None:
        self._deadline.cancel()  # the request is in; the reply has the socket timeout only
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s: " + format, self.address_string(), *args)


def _json_object(body: bytes, example: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("body is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object like {example}")
    return value


def _flag(value: dict[str, Any], name: str, default: bool | None = None) -> bool:
    """A JSON boolean, or BookKeeper's string form of one ("true"/"false", as its docs write)."""
    flag = value.get(name, default)
    if isinstance(flag, str) and flag.lower() in ("true", "false"):
        return flag.lower() == "true"
    if not isinstance(flag, bool):
        raise ValueError(f"{name} must be true or false, got {flag!r}")
    return flag


def _gc_flags(body: bytes) -> tuple[bool, bool]:
    """``(forceMajor, forceMinor)`` from BookKeeper's optional JSON body; both default to true."""
    if not body.strip():
        return True, True
    value = _json_object(body, '{"forceMajor": true, "forceMinor": false}')
    return _flag(value, "forceMajor", True), _flag(value, "forceMinor", True)


# path -> (BookKeeper's body prefix, whether it suspends)
_SUSPENSIONS = {
    "/api/v1/bookie/gc/suspend_compaction": ("suspend", True),
    "/api/v1/bookie/gc/resume_compaction": ("resume", False),
}


def _suspension_flags(body: bytes, verb: str) -> tuple[bool, bool]:
    """``({verb}Major, {verb}Minor)`` from BookKeeper's body; each defaults to false, and a body
    that names neither is refused (it would do nothing)."""
    example = f'{{"{verb}Major": true, "{verb}Minor": true}}'
    value = _json_object(body, example)
    flags = _flag(value, f"{verb}Major", False), _flag(value, f"{verb}Minor", False)
    if not any(flags):
        raise ValueError(f"nothing to {verb}: expected a body like {example}")
    return flags


def _read_only_flag(body: bytes) -> bool:
    """``readOnly`` from BookKeeper's ``{"readOnly": true}`` body (required)."""
    return _flag(_json_object(body, '{"readOnly": true}'), "readOnly")


def _marks_json(marks: Sequence[JournalMark]) -> bytes:
    """Each journal's mark under ``journals`` (BookKeeper's endpoint also answers one per journal);
    ``journal_id`` and ``offset`` at the top are the first journal's, the whole answer of a bookie
    with one journal dir."""
    first = marks[0].mark
    journals = [
        {"journal_dir": str(m.journal_dir), "journal_id": m.mark.journal_id, "offset": m.mark.offset}
        for m in marks
    ]
    return json.dumps({"journal_id": first.journal_id, "offset": first.offset, "journals": journals}).encode()


class BookieHttpServer:
    def __init__(
        self, registry: CollectorRegistry, bind_address: str = "127.0.0.1", port: int = 0,
        last_log_marks: Callable[[], Sequence[JournalMark]] | None = None,
        gc: GcControl | None = None,
        state: StateControl | None = None,
        readiness: Callable[[], str | None] | None = None,
        disk_info: Callable[[], DiskInfo] | None = None,
        security: BookieSecurity | None = None,
        server_config: Callable[[], Mapping[str, str]] | None = None,
        limits: ListenerLimits | None = None,
        limit_stats: LimitStats | None = None,
    ) -> None:
        """``readiness`` says why the bookie is not ready, or None when it is; ``disk_info``
        gives the space for ``/api/v1/bookie/info``; ``security`` TLS and who may call;
        ``limit_stats`` counts refused and cut-off connections."""
        self._security = security
        self._server_config = server_config
        self._limits = limits or ListenerLimits()
        self._limit_stats = limit_stats
        self._last_log_marks = last_log_marks
        self._readiness = readiness
        self._disk_info = disk_info
        self._gc = gc
        self._state = state
        self._registry = registry
        self._bind_address = bind_address
        self._requested_port = port
        self._server: _AdminServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        """Bind and serve in a daemon thread; returns the bound port."""
        server = _AdminServer((self._bind_address, self._requested_port), _AdminRequestHandler)
        server.setup_limits(self._limits, self._limit_stats)
        server.registry = self._registry
        server.last_log_marks = self._last_log_marks
        server.gc = self._gc
        server.state = self._state
        server.readiness = self._readiness
        server.disk_info = self._disk_info
        server.security = self._security
        server.server_config = self._server_config
        if self._security is not None and self._security.ssl_context is not None:
            server.socket = self._security.ssl_context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, name="bookie-http", daemon=True)
        self._thread.start()
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
