"""``pybk localcluster``: ZooKeeper + N bookies on this machine until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pybk import event_loop
from pybk.arg_types import positive, positive_float, tcp_port
from pybk.localcluster.banner import render_banner
from pybk.localcluster.certs import make_cluster_tls
from pybk.localcluster.cluster import LocalCluster, run_until_signalled
from pybk.localcluster.layout import ClusterLayout, LayoutError

log = logging.getLogger(__name__)

EXIT_USAGE = 2

DESCRIPTION = """\
Start a real ZooKeeper and N bookie processes on this machine (loopback only), initialise the
cluster metadata (kept if it exists), wait until every bookie is registered, write and read back a
replicated ledger as a self-check, print what runs where, and stay up until Ctrl-C or SIGTERM;
then stop every process (bookies first) and exit 0.

Files under --data-dir D: D/zookeeper, D/bookie-<i>/{journal,ledgers}, D/logs/<process>.log.
Bookie i listens on BASE_PORT+i (gRPC) and BASE_PORT+100+i (HTTP admin API and /metrics).
With --autorecovery, a `pybk autorecovery` process re-replicates the data of a bookie that stays
down (lostBookieRecoveryDelay 0); its admin API and metrics are on BASE_PORT+99, its log in D/logs.
With --tls, a throw-away CA and certificates go to D/tls: every listener speaks TLS and takes
the caller's identity from its client certificate; clients and tools find theirs through
PYBK_CLIENT_CONF=D/tls/client.conf (the banner says so).
Running again with the same --data-dir brings the same cluster and its ledgers back.
Without --data-dir a temporary directory is used and removed on exit.

Exit codes: 0 stopped cleanly, 1 the cluster could not start, 2 bad arguments.
"""


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "localcluster",
        help="run ZooKeeper + N bookies locally until Ctrl-C",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bookies", type=positive, default=3, metavar="N",
                        help="number of bookies (default 3)")
    parser.add_argument("--zk-port", type=tcp_port, default=2181, metavar="PORT",
                        help="ZooKeeper client port (default 2181)")
    parser.add_argument("--base-port", type=tcp_port, default=3181, metavar="PORT",
                        help="first bookie's gRPC port (default 3181); HTTP ports start at BASE_PORT+100, "
                             "add ports at BASE_PORT+200")
    parser.add_argument("--data-dir", type=Path, default=None, metavar="D",
                        help="where data and logs live; kept across runs (default: a temporary directory)")
    parser.add_argument("--autorecovery", action="store_true",
                        help="also run pybk autorecovery (admin API and metrics on BASE_PORT+99)")
    parser.add_argument("--tls", action="store_true",
                        help="TLS with client certificates on every bookie listener (certificates in D/tls)")
    parser.add_argument("--grace", type=positive_float, default=10.0, metavar="S",
                        help="seconds each process gets to stop after SIGTERM before SIGKILL (default 10)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The start-up steps' ZooKeeper sessions may see ZooKeeper go away at shutdown: not news.
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    temporary = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="pybk-localcluster-")) if temporary else args.data_dir
    try:
        try:
            layout = ClusterLayout(
                data_dir=data_dir.resolve(), bookies=args.bookies,
                zk_port=args.zk_port, base_port=args.base_port, autorecovery=args.autorecovery,
            )
            if args.tls:
                layout = _with_tls(layout)
        except LayoutError as exc:
            print(f"pybk localcluster: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        busy = layout.busy_ports()
        if busy:
            print(
                f"pybk localcluster: error: port(s) {', '.join(map(str, busy))} already in use on "
                f"{layout.host} (another local cluster running? pick --zk-port/--base-port)",
                file=sys.stderr,
            )
            return 1
        layout.data_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive(layout.data_dir) as locked:
            if not locked:
                print(f"pybk localcluster: error: another pybk localcluster is using {layout.data_dir}",
                      file=sys.stderr)
                return 1
            return event_loop.run(_serve(layout, args.grace, temporary))
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


def _with_tls(layout: ClusterLayout) -> ClusterLayout:
    """The layout with fresh TLS files; this process's own clients (the self-check) use them too."""
    tls = make_cluster_tls(layout.tls_dir, layout.host)
    os.environ["PYBK_CLIENT_CONF"] = str(tls.client_conf)
    return dataclasses.replace(
        layout, bookie_env=tuple(tls.bookie_settings.items()), client_conf=tls.client_conf
    )


@contextlib.contextmanager
def _exclusive(data_dir: Path) -> Iterator[bool]:
    """Hold an exclusive lock on ``data_dir`` (two clusters on one ZooKeeper data directory and
    the same bookie directories would corrupt both). The kernel drops it if we die."""
    with (data_dir / "localcluster.lock").open("w") as lock_file:
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


async def _serve(layout: ClusterLayout, grace_s: float, temporary: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    cluster = LocalCluster(layout, out=sys.stdout, grace_s=grace_s)

    def on_ready(ready: LocalCluster) -> None:
        ready.say(render_banner(
            layout, ready.bookie_ids, ready.self_check,
            cluster_created=ready.cluster_created, temporary_data=temporary,
        ))

    try:
        return await run_until_signalled(cluster, stop, on_ready)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
