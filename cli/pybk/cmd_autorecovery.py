"""``pybk autorecovery``: re-replicate lost bookies' data automatically, until SIGTERM/SIGINT
(BookKeeper's ``bookkeeper autorecovery``; see :mod:`autorecovery.service`).

Run one or more per cluster: they elect one leader, the others stand by. Configuration is read
like a bookie's (``--conf`` bk_server.conf keys, then ``BK_<key>`` environment variables, then
flags): ``zkServers``, ``lostBookieRecoveryDelay``, ``auditorPeriodicBookieCheckInterval``,
``openLedgerRereplicationGracePeriod``, ``replicationRateByBytes``. A configuration error exits
with code 2; ZooKeeper unreachable at start with code 1.

Security, as BookKeeper's AutoRecoveryMain, from the same keys as a bookie's: its TLS files
(``tlsTrustStore``, ``tlsCertificatePath``, ``tlsKeyStore``) are the client's towards the
bookies, and ``zkEnableSecurity`` / ``zkDigestAuthFile`` its ZooKeeper identity. Without them,
the client settings of the environment apply (``PYBK_CLIENT_CONF``, ``bkclient.tls``).

With ``--http-port`` it serves BookKeeper's ``/api/v1/autorecovery/*`` admin calls, ``/heartbeat``
and ``/metrics`` (docs/http-api.md) on ``httpServerHost`` (127.0.0.1), with the bookie's TLS,
authentication (every call that changes something needs the admin right) and HTTP limits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from autorecovery import AutoRecovery
from autorecovery.http_routes import BackgroundJob, autorecovery_routes
from bkclient import BKError, BookKeeper
from bookie.config import BookieConfig, ConfigError, load_config
from bookie.http import AdminHttpServer, ClusterAccess
from bookie.http.cluster import client_config_of
from bookie.limits import LimitStats
from bookie.security import BookieSecurity
from pybk import event_loop
from pybk.arg_types import tcp_port_or_any
from pybk.help_text import description_from
from pybk.log_level import add_log_level

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "autorecovery",
        help="re-replicate the data of lost bookies automatically (run one or more per cluster)",
        description=description_from(__doc__),
    )
    parser.add_argument("--conf", type=Path, help="bk_server.conf-style key=value file")
    parser.add_argument("--zk", help="ZooKeeper connect string (zkServers)")
    parser.add_argument("--http-port", type=tcp_port_or_any,
                        help="serve the admin API (/api/v1/autorecovery/*), /heartbeat and Prometheus"
                             " /metrics on this port (0 = any; default off)")
    add_log_level(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    overrides = {"zkServers": args.zk} if args.zk else {}
    try:
        config = load_config(args.conf, os.environ, overrides)
    except ConfigError as exc:
        print(f"pybk autorecovery: configuration error: {exc}", file=sys.stderr)
        return 2
    if config.zk_servers is None:
        print("pybk autorecovery: configuration error: zkServers is 'none'", file=sys.stderr)
        return 2
    return event_loop.run(_serve(config, config.zk_servers, args.http_port))


async def _serve(config: BookieConfig, zk_servers: str, http_port: int | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    identity = f"{socket.gethostname()}:{os.getpid()}"
    registry = CollectorRegistry()
    http: AdminHttpServer | None = None
    if http_port is not None:
        # TLS, who may call and the limits as on the bookies' admin ports (httpServer* keys)
        cluster, job = ClusterAccess(zk_servers, client_config_of(config)), BackgroundJob()

        async def close_routes() -> None:
            await job.close()
            await cluster.close()

        routes = autorecovery_routes(cluster, job, config.autorecovery.replication_rate_bytes)
        http = AdminHttpServer(registry, routes, bind_address=config.http_address, port=http_port,
                               security=BookieSecurity(config.security, registry), limits=config.limits,
                               limit_stats=LimitStats(registry), on_close=close_routes,
                               thread_name="autorecovery-http")
        log.info("autorecovery admin API and metrics on http port %d", await asyncio.to_thread(http.start))
    try:
        async with await BookKeeper.connect(zk_servers, client_config_of(config)) as bk:
            service = AutoRecovery(bk, config.autorecovery, identity, registry)
            await service.start()
            settings = config.autorecovery
            log.info("autorecovery %s running (lostBookieRecoveryDelay %g s, grace for open ledgers %g s)",
                     identity, settings.lost_bookie_delay_s, settings.open_ledger_grace_s)
            try:
                await stop.wait()
            finally:
                await service.close()
    except BKError as exc:
        log.error("autorecovery failed: %s", exc)
        return 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if http is not None:
            await asyncio.to_thread(http.close)
    log.info("autorecovery %s stopped", identity)
    return 0
