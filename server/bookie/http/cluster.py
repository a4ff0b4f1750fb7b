"""The admin API's client of the cluster, and the endpoints that need one: BookKeeper's
``/api/v1/ledger/{list,metadata,read,delete}`` and ``/api/v1/bookie/{list_bookies,
list_bookie_info,cluster_info,sanity}`` on a bookie. The autorecovery process's endpoints use
the same client (:mod:`autorecovery.http_routes`).

The client is connected on the first call that needs it, on the HTTP server's own loop (its own
ZooKeeper session, as BookKeeper's admin endpoints make their own ``BookKeeperAdmin``), so no
admin call ever runs on the bookie's loop. It speaks to the cluster with the process's client
settings: its TLS files as client certificate and trust, its ZooKeeper credentials.

Answers are bounded: ``ledger/read`` gives at most :data:`MAX_READ_ENTRIES` entries and
:data:`MAX_READ_BYTES` bytes per call (``page`` walks a longer range), ``ledger/list`` with
metadata at most :data:`MAX_LIST_METADATA` ledgers per call (``page`` of
:data:`LIST_PAGE_SIZE`). Ledger metadata is answered as a JSON object (the shell's ``--json``
form), where BookKeeper answers its own serialized text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bkclient import BookKeeper, ClientConfig
from bkclient.admin_views import (
    bookie_disk_space,
    bookie_sanity,
    cluster_info,
    metadata_dict,
    read_metadata_many,
)
from bkclient.context import ClientContext
from bkclient.tls import ClientSecurity
from bkmeta.bookie_presence import zk_security_of
from bookie.config import BookieConfig
from bookie.http.replies import BadRequest, Unavailable, error_reply, flag, json_reply, whole_number
from bookie.http.server import Route
from bookie.security import Right

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
MAX_READ_ENTRIES = 1000  # BookKeeper's page of ledger/read
MAX_READ_BYTES = 16 * 1024 * 1024
LIST_PAGE_SIZE = 100  # BookKeeper's page of ledger/list with metadata
MAX_LIST_METADATA = 10_000
SANITY_ENTRIES = 10
SANITY_TIMEOUT_S = 30.0


def client_config_of(config: BookieConfig) -> ClientConfig:
    """The client settings of a bookie-style configuration (a bookie's, or autorecovery's): its TLS
    files as the client's (None: the environment's), its ZooKeeper credentials, and the placement
    policy copies follow."""
    tls = config.security.tls
    security = None
    if tls is not None and tls.trust_path is not None:
        security = ClientSecurity(tls.trust_path, tls.cert_path, tls.key_path)
    return ClientConfig(security=security, zk_security=zk_security_of(config),
                        placement_policy=config.autorecovery.placement_policy,
                        min_racks_per_write_quorum=config.autorecovery.min_racks_per_write_quorum)


class ClusterUnavailableError(Unavailable):
    """No client of the cluster could be made (no ZooKeeper configured, or unreachable)."""


class ClusterAccess:
    """A client of the cluster, connected on first use on the loop that asks (the HTTP server's);
    :meth:`close` there too."""

    def __init__(self, zk_servers: str | None, config: ClientConfig) -> None:
        self._zk_servers = zk_servers
        self.config = config
        self._client: BookKeeper | None = None
        self._lock: asyncio.Lock | None = None

    async def client(self) -> BookKeeper:
        if self._zk_servers is None:
            raise ClusterUnavailableError("this process runs without ZooKeeper (zkServers=none)")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                try:
                    async with asyncio.timeout(CONNECT_TIMEOUT_S):
                        self._client = await BookKeeper.connect(self._zk_servers, self.config)
                except (TimeoutError, OSError) as exc:
                    why = f"cannot reach ZooKeeper at {self._zk_servers}: {exc}"
                    raise ClusterUnavailableError(why) from exc
            return self._client

    async def own_client(self) -> BookKeeper:
        """A second client on the same session, for a call that changes its client's settings
        (the sanity check's placement); close it after use."""
        shared = await self.client()
        return BookKeeper(ClientContext.create(shared.ctx.metadata, self.config), owns_metadata=False)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


def cluster_routes(
    cluster: ClusterAccess, bookie_id: str | None = None, read_only: Callable[[], bool] | None = None
) -> list[Route]:
    """The cluster endpoints of a bookie (``bookie_id`` and ``read_only``: for its sanity check)."""
    routes = [
        Route("GET", "/api/v1/ledger/list", _list_ledgers(cluster)),
        Route("GET", "/api/v1/ledger/metadata", _ledger_metadata(cluster)),
        Route("GET", "/api/v1/ledger/read", _read_ledger(cluster)),
        Route("DELETE", "/api/v1/ledger/delete", _delete_ledger(cluster)),
        Route("GET", "/api/v1/bookie/list_bookies", _list_bookies(cluster)),
        Route("GET", "/api/v1/bookie/list_bookie_info", _list_bookie_info(cluster)),
        Route("GET", "/api/v1/bookie/cluster_info", _cluster_info(cluster)),
    ]
    if bookie_id is not None:
        # it writes a ledger: an administrator's call although BookKeeper makes it a GET
        sanity = _sanity(cluster, bookie_id, read_only)
        routes.append(Route("GET", "/api/v1/bookie/sanity", sanity, Right.ADMIN))
    return routes


Handler = Callable[[web.Request], Any]


def _ledger_id(request: web.Request) -> int:
    return whole_number(request.query.get("ledger_id"), "ledger_id")


def _list_ledgers(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        with_metadata = flag(request.query.get("print_metadata"), "print_metadata", False)
        page = whole_number(request.query.get("page"), "page", 0, minimum=1) if "page" in request.query else 0
        manager = (await cluster.client()).ctx.metadata.ledger_manager
        ledger_ids = sorted(await manager.list_ledgers())
        if not with_metadata:
            return json_reply({str(i): None for i in ledger_ids})  # BookKeeper's {id: null}
        if page:
            ledger_ids = ledger_ids[(page - 1) * LIST_PAGE_SIZE: page * LIST_PAGE_SIZE]
        elif len(ledger_ids) > MAX_LIST_METADATA:
            raise BadRequest(f"{len(ledger_ids)} ledgers: ask for their metadata by page=1.. "
                             f"({LIST_PAGE_SIZE} a page)")
        found = await read_metadata_many(
            manager, ledger_ids, lambda i, exc: log.warning("ledger/list: ledger %d skipped: %s", i, exc)
        )
        return json_reply({str(i): metadata_dict(i, v.value) for i, v in found})

    return handle


def _ledger_metadata(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        manager = (await cluster.client()).ctx.metadata.ledger_manager
        versioned = await manager.read_ledger_metadata(ledger_id)  # NoSuchLedgerError: 404
        return json_reply({str(ledger_id): {**metadata_dict(ledger_id, versioned.value),
                                            "version": versioned.version}})

    return handle


def _read_range(query: Any) -> tuple[int, int | None]:
    """BookKeeper's ``start_entry_id``, ``end_entry_id`` (-1 or none: to the last add confirmed) and
    ``page`` (of :data:`MAX_READ_ENTRIES`): the first and last entry to read (None: the LAC)."""
    first = whole_number(query.get("start_entry_id"), "start_entry_id", 0)
    end = query.get("end_entry_id")
    last = None if end in (None, "-1") else whole_number(end, "end_entry_id")
    if "page" in query:
        page = whole_number(query.get("page"), "page", minimum=1)
        first = max(first, (page - 1) * MAX_READ_ENTRIES)
        page_last = page * MAX_READ_ENTRIES - 1
        last = page_last if last is None else min(last, page_last)
    if last is not None and last < first:
        raise BadRequest(f"end_entry_id {last} is before start_entry_id {first}")
    return first, last


def _read_ledger(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        first, last = _read_range(request.query)
        bk = await cluster.client()
        metadata = await bk.ledger_metadata(ledger_id)
        handle = await bk.open_ledger(ledger_id, password=metadata.password, recovery=False)
        try:
            lac = handle.last_add_confirmed if handle.is_closed else await handle.read_last_add_confirmed()
            last = lac if last is None else min(last, lac)
            if last - first + 1 > MAX_READ_ENTRIES:
                raise BadRequest(f"entries {first}..{last} are more than {MAX_READ_ENTRIES} for one answer:"
                                 f" ask for a smaller range or by page=1..")
            entries: dict[str, str] = {}
            size = 0
            if last >= first:
                async for entry in handle.read(first, last):
                    size += len(entry.data)
                    if size > MAX_READ_BYTES:
                        raise BadRequest(f"entries {first}..{last} are more than {MAX_READ_BYTES} bytes for"
                                         " one answer: ask for a smaller range")
                    # BookKeeper's answer: entry id -> the entry as text
                    entries[str(entry.entry_id)] = entry.data.decode("utf-8", errors="replace")
        finally:
            await handle.close()
        return json_reply(entries)

    return handle


def _delete_ledger(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        manager = (await cluster.client()).ctx.metadata.ledger_manager
        await manager.read_ledger_metadata(ledger_id)  # NoSuchLedgerError: 404
        await manager.remove_ledger_metadata(ledger_id)
        return json_reply({"ledger_id": ledger_id, "deleted": True})

    return handle


def _list_bookies(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        kind = request.query.get("type", "rw")
        if kind not in ("rw", "ro"):
            raise BadRequest(f"type must be rw or ro, got {kind!r}")
        hostnames = flag(request.query.get("print_hostnames"), "print_hostnames", False)
        watcher = (await cluster.client()).ctx.bookie_watcher
        bookies = watcher.writable_bookies() if kind == "rw" else watcher.readonly_bookies()
        # BookKeeper's answer: bookie id -> its host name (null unless asked for)
        return json_reply({b: info.grpc_host if hostnames else None for b, info in sorted(bookies.items())})

    return handle


def _list_bookie_info(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        bookies = await bookie_disk_space(await cluster.client())
        if not bookies:
            return error_reply(404, "no bookie is registered")
        answer: dict[str, Any] = {}
        for b in bookies:
            answer[b["bookie_id"]] = ({"error": b["error"]} if "error" in b
                                      else {"free": b["free_bytes"], "total": b["total_bytes"]})
        answered = [b for b in bookies if "error" not in b]
        answer["clusterInfo"] = {"total_free": sum(b["free_bytes"] for b in answered),
                                 "total": sum(b["total_bytes"] for b in answered)}
        return json_reply(answer)

    return handle


def _cluster_info(cluster: ClusterAccess) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        return json_reply(await cluster_info(await cluster.client()))

    return handle


def _sanity(cluster: ClusterAccess, bookie_id: str, read_only: Callable[[], bool] | None) -> Handler:
    one_at_a_time = asyncio.Lock()  # made before the loop runs: only ever awaited on its loop

    async def handle(request: web.Request) -> web.Response:
        if read_only is not None and read_only():
            return json_reply({"passed": False, "readOnly": True})  # as BookKeeper: no write is tried
        async with one_at_a_time, await cluster.own_client() as bk:
            result = await bookie_sanity(bk, bookie_id, SANITY_ENTRIES, SANITY_TIMEOUT_S)
        if not result["ok"]:
            log.warning("bookie sanity check failed: %s", result["error"])
        answer = {"passed": result["ok"], "readOnly": False}
        if not result["ok"]:
            answer["error"] = result["error"]
        return json_reply(answer)

    return handle


__all__ = ["ClusterAccess", "ClusterUnavailableError", "client_config_of", "cluster_routes"]
