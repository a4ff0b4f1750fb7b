"""``pybk zookeeper [--port 2181] [--data-dir D]``: a real ZooKeeper server in the foreground.

SIGTERM or Ctrl-C stops the JVM and exits 0; if the JVM dies on its own, its exit code is ours.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer
from bkproto.errors import MetadataStoreError
from pybk.arg_types import positive, tcp_port

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "zookeeper", help="run a real ZooKeeper server (Java) in the foreground"
    )
    parser.add_argument("--port", type=tcp_port, default=2181, help="client port (default 2181)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--data-dir", type=Path, default=Path("./data/zookeeper"), help="data directory")
    parser.add_argument("--heap-mb", type=positive, default=128, help="JVM heap limit in MiB (default 128)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = ZooKeeperConfig(
        data_dir=args.data_dir.resolve(), port=args.port, host=args.host, heap_mb=args.heap_mb
    )
    server = ZooKeeperServer(config)
    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        log.info("signal %d: stopping ZooKeeper", signum)
        # Only signal the JVM here: the main thread may be inside Popen.wait(), whose lock a
        # second wait() from this handler would deadlock on. The main thread reaps the JVM.
        server.terminate()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        try:
            server.wait_ready()
        except MetadataStoreError as e:
            server.stop()
            if stopping:
                return 0
            print(f"pybk zookeeper: {e}", file=sys.stderr)
            return 1
        print(f"ZooKeeper ready on {server.hosts} (data {config.data_dir})", file=sys.stderr, flush=True)
        rc = server.wait()
        return 0 if stopping else rc
    finally:
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
