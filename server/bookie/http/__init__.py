"""The bookie's HTTP admin API (BookKeeper's paths, methods and answers), on aiohttp: ``GET
/heartbeat`` -> ``OK``, ``GET /metrics`` (Prometheus text of the bookie's registry), the
bookie's own endpoints (:mod:`bookie.http.bookie_routes`) and, with ZooKeeper, the cluster's
(:mod:`bookie.http.cluster`). How requests are served, bounded and authorized:
:mod:`bookie.http.server`. The autorecovery process serves its endpoints with the same server
(:mod:`autorecovery.http_routes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from bookie.api import DiskInfo, JournalMark
from bookie.http.bookie_routes import BookieControls, GcControl, StateControl, bookie_routes
from bookie.http.cluster import ClusterAccess, cluster_routes
from bookie.http.server import AdminHttpServer, Route
from bookie.limits import LimitStats, ListenerLimits
from bookie.security import BookieSecurity

AUTORECOVERY_HINT = {
    "/api/v1/autorecovery/": "the autorecovery process serves these: pybk autorecovery --http-port"
}


class BookieHttpServer(AdminHttpServer):
    """The bookie's admin server: every endpoint whose part the bookie has."""

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
        cluster: ClusterAccess | None = None,
        bookie_id: str | None = None,
        journal_dirs: Sequence[Path] = (),
        ledger_dirs: Sequence[Path] = (),
    ) -> None:
        """``readiness`` says why the bookie is not ready, or None when it is; ``disk_info``
        gives the space for ``/api/v1/bookie/info``; ``security`` TLS and who may call;
        ``limit_stats`` counts refused and cut-off connections; ``cluster`` (None: no cluster
        endpoints) the client for the ledger and cluster endpoints, ``bookie_id`` the one the
        sanity check writes to."""
        controls = BookieControls(last_log_marks, gc, state, readiness, disk_info, server_config,
                                  tuple(journal_dirs), tuple(ledger_dirs))
        routes = bookie_routes(controls)
        if cluster is not None:
            read_only = (lambda: state.read_only) if state is not None else None
            routes += cluster_routes(cluster, bookie_id, read_only)
        super().__init__(registry, routes, bind_address=bind_address, port=port, security=security,
                         limits=limits, limit_stats=limit_stats,
                         on_close=cluster.close if cluster is not None else None,
                         not_found_hints=AUTORECOVERY_HINT)


__all__ = ["AdminHttpServer", "BookieHttpServer", "ClusterAccess", "GcControl", "Route", "StateControl"]
