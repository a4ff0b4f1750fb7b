"""The autorecovery endpoints of BookKeeper's admin API, served by ``pybk autorecovery
--http-port`` with the bookie's HTTP server (:class:`bookie.http.server.AdminHttpServer`: the
same TLS, authentication, limits and JSON errors):

- ``GET /api/v1/autorecovery/status`` -> ``{"enabled": bool}``; ``PUT ...?enabled=true|false``
  enables or disables re-replication for the whole cluster;
- ``PUT /api/v1/autorecovery/bookie`` ``{"bookie_src": [ids], "delete_cookie": bool}``:
  re-replicate lost bookies' ledgers (``pybk shell recover``), in the background;
- ``GET /api/v1/autorecovery/list_under_replicated_ledger`` (``missingreplica``,
  ``excludingmissingreplica``, ``printmissingreplica``): the ledgers short of a replica, 404 when
  none (as BookKeeper);
- ``GET /api/v1/autorecovery/who_is_auditor`` -> ``{"Auditor": id}`` (404 when none leads);
- ``PUT /api/v1/autorecovery/trigger_audit``: re-replicate lost bookies now (409 when nothing
  would act on it);
- ``GET``/``PUT {"delay_seconds": N}`` ``/api/v1/autorecovery/lost_bookie_recovery_delay``;
- ``PUT /api/v1/autorecovery/decommission`` ``{"bookie_src": id}``: re-replicate a stopped
  bookie's ledgers and delete its cookie (``pybk shell decommissionbookie``), in the background.

Every call but a ``GET`` changes the cluster: with authentication on it needs the admin right.
Long work (recover, decommission) runs as one background job at a time on the server's loop (a
second is refused with 409 while one runs); its outcome is logged, and a later ``GET
list_under_replicated_ledger`` shows what is left. Success answers are BookKeeper's sentences
where BookKeeper answers with one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bkclient import BookKeeper, BookKeeperAdmin
from bkclient.admin import check_bookie_id
from bkclient.admin_views import trigger_audit, underreplicated_ledgers
from bkmeta.replication_control import MAX_DELAY_S
from bookie.http.cluster import ClusterAccess
from bookie.http.replies import (
    BadRequest,
    Conflict,
    error_reply,
    flag,
    json_object,
    json_reply,
    text_reply,
    whole_number,
)
from bookie.http.server import Route

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.Response]]
PREFIX = "/api/v1/autorecovery"


class BackgroundJob:
    """At most one long admin job (recover, decommission) at a time, on the server's loop."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._what = ""

    def start(self, what: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work()`` in the background, or raise Conflict while another job runs."""
        if self._task is not None and not self._task.done():
            raise Conflict(f"busy with {self._what}; try again once it is done")
        self._what = what
        self._task = asyncio.create_task(self._run(what, work))

    @staticmethod
    async def _run(what: str, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except Exception:  # logged: the caller was answered long ago
            log.error("autorecovery http: %s failed", what, exc_info=True)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def autorecovery_routes(cluster: ClusterAccess, job: BackgroundJob, rate_bytes: int = 0) -> list[Route]:
    """The route table; ``rate_bytes`` bounds the copies of recover and decommission
    (replicationRateByBytes)."""

    async def control() -> Any:
        return (await cluster.client()).ctx.metadata.replication_control

    async def status(request: web.Request) -> web.Response:
        return json_reply({"enabled": await (await control()).is_enabled()})

    async def set_status(request: web.Request) -> web.Response:
        raw = request.query.get("enabled")
        if raw is None and (await request.read()).strip():
            raw = (await json_object(request, '{"enabled": true}')).get("enabled")
        enabled = flag(raw, "enabled")
        switches = await control()
        await (switches.enable() if enabled else switches.disable())
        return json_reply({"enabled": await switches.is_enabled()})

    async def recover(request: web.Request) -> web.Response:
        body = await json_object(request, '{"bookie_src": ["host:3181"], "delete_cookie": false}')
        sources = body.get("bookie_src")
        if not isinstance(sources, list) or not sources or not all(isinstance(b, str) for b in sources):
            raise BadRequest('bookie_src must be a list of bookie ids, like ["host:3181"]')
        for bookie_id in sources:
            check_bookie_id(bookie_id)
        delete_cookie = flag(body.get("delete_cookie"), "delete_cookie", False)
        # bookie_dest is accepted and ignored, as BookKeeper does: the placement policy picks
        bk = await cluster.client()
        if delete_cookie:  # a running bookie without its cookie could not restart
            running = [b for b in sources if await bk.ctx.bookie_watcher.is_registered(b)]
            if running:
                raise Conflict(f"{', '.join(running)} still registered: stop it before deleting its cookie")
        what = f"recovering {', '.join(sources)}"
        job.start(what, lambda: _recover(bk, sources, delete_cookie, rate_bytes))
        return text_reply("Success send recover request command")

    async def list_under_replicated(request: web.Request) -> web.Response:
        including = request.query.get("missingreplica") or None
        excluding = request.query.get("excludingmissingreplica") or None
        with_replicas = flag(request.query.get("printmissingreplica"), "printmissingreplica", False)
        found = await underreplicated_ledgers(await cluster.client())
        ledgers = {
            ledger_id: sorted(missing) for ledger_id, missing in sorted(found.items())
            if (including is None or including in missing) and (excluding is None or excluding not in missing)
        }
        if not ledgers:
            return error_reply(404, "No under replicated ledgers found")
        if with_replicas:
            return json_reply({str(i): missing for i, missing in ledgers.items()})
        return json_reply(list(ledgers))

    async def who_is_auditor(request: web.Request) -> web.Response:
        auditor = await (await control()).auditor()
        if auditor is None:
            return error_reply(404, "no autorecovery is leading (is pybk autorecovery running?)")
        return json_reply({"Auditor": auditor})

    async def audit(request: web.Request) -> web.Response:
        refusal = await trigger_audit(await control())
        if refusal is not None:
            raise Conflict(refusal)
        return text_reply("Successfully triggered audit")

    async def get_delay(request: web.Request) -> web.Response:
        delay = await (await control()).lost_bookie_delay()
        if delay is None:
            return error_reply(404, "the cluster has no lostBookieRecoveryDelay yet (no autorecovery led)")
        return text_reply(f"lostBookieRecoveryDelay value: {delay}")

    async def set_delay(request: web.Request) -> web.Response:
        body = await json_object(request, '{"delay_seconds": 30}')
        delay = whole_number(body.get("delay_seconds"), "delay_seconds")
        if delay > MAX_DELAY_S:
            raise BadRequest(f"delay_seconds must be at most {MAX_DELAY_S}, got {delay}")
        await (await control()).set_lost_bookie_delay(delay)
        return text_reply(f"Success set lostBookieRecoveryDelay to {delay}")

    async def decommission(request: web.Request) -> web.Response:
        bookie_id = (await json_object(request, '{"bookie_src": "host:3181"}')).get("bookie_src")
        if not isinstance(bookie_id, str):
            raise BadRequest('bookie_src must be a bookie id, like "host:3181"')
        check_bookie_id(bookie_id)
        bk = await cluster.client()
        if await bk.ctx.bookie_watcher.is_registered(bookie_id):
            raise Conflict(f"bookie {bookie_id} is still registered: stop it before decommissioning it")
        job.start(f"decommissioning {bookie_id}", lambda: _decommission(bk, bookie_id, rate_bytes))
        return text_reply(f"Success send decommission Bookie command {bookie_id}")

    return [
        Route("GET", f"{PREFIX}/status", status),
        Route("PUT", f"{PREFIX}/status", set_status),
        Route("PUT", f"{PREFIX}/bookie", recover),
        Route("GET", f"{PREFIX}/list_under_replicated_ledger", list_under_replicated),
        Route("GET", f"{PREFIX}/who_is_auditor", who_is_auditor),
        Route("PUT", f"{PREFIX}/trigger_audit", audit),
        Route("GET", f"{PREFIX}/lost_bookie_recovery_delay", get_delay),
        Route("PUT", f"{PREFIX}/lost_bookie_recovery_delay", set_delay),
        Route("PUT", f"{PREFIX}/decommission", decommission),
    ]


async def _recover(bk: BookKeeper, sources: list[str], delete_cookie: bool, rate_bytes: int) -> None:
    reports = await BookKeeperAdmin(bk, replication_rate_bytes=rate_bytes).recover_bookies(sources)
    failed = [r.ledger_id for r in reports if not r.ok]
    copied = sum(r.entries_copied for r in reports)
    log.info("autorecovery http: recovered %s: %d ledger(s), %d entries copied, failed: %s",
             ", ".join(sources), len(reports), copied, failed or "none")
    if delete_cookie and not failed:
        for bookie_id in sources:
            await bk.ctx.metadata.cookies.delete(bookie_id)
        log.info("autorecovery http: cookies of %s deleted", ", ".join(sources))


async def _decommission(bk: BookKeeper, bookie_id: str, rate_bytes: int) -> None:
    result = await BookKeeperAdmin(bk, replication_rate_bytes=rate_bytes).decommission_bookie(bookie_id)
    if result.cookie_deleted:
        log.info("autorecovery http: bookie %s decommissioned (%d ledger(s) re-replicated)",
                 bookie_id, len(result.ledgers))
    else:
        left = [r.ledger_id for r in result.ledgers if not r.ok or r.skipped is not None]
        log.warning("autorecovery http: bookie %s NOT decommissioned: ledgers %s still name it",
                    bookie_id, left)
