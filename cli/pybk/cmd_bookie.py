"""``pybk bookie``: run one bookie daemon in the foreground until SIGTERM/SIGINT.

Configuration comes from ``--conf`` (bk_server.conf keys), then ``BK_<key>`` environment variables,
then these flags. A configuration error prints one clear line and exits with code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from bkmeta import BookiePresence
from bookie import main as bookie_main
from bookie.config import ConfigError, load_config
from bookie.config_report import effective_settings, render_json, render_text
from bookie.config_sources import ignored_line
from bookie.main import run_daemon
from pybk import event_loop
from pybk.allocator import limit_malloc_arenas
from pybk.json_option import add_json_option
from pybk.log_level import add_log_level

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bookie",
        help="run a bookie (storage server) in the foreground",
        description="Run a bookie until SIGTERM/SIGINT. Flags override BK_<key> environment "
        "variables, which override the --conf file (BookKeeper's bk_server.conf key names).",
    )
    parser.add_argument("--conf", type=Path, help="bk_server.conf-style key=value file")
    parser.add_argument("--zk", help="ZooKeeper connect string (zkServers); 'none' runs unregistered")
    parser.add_argument("--port", type=int, help="gRPC port (bookiePort; 0 picks a free port)")
    parser.add_argument(
        "--add-port",
        type=int,
        help="add port, the clients' fast path for adds (bookieAddPort; default 0 picks a free port,"
        " -1 = none)",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        help="serve /heartbeat, /metrics and the admin API (/api/v1/bookie/...) on this port (0 = any)",
    )
    add_dir_options(parser)
    parser.add_argument("--bind", help="listen address (bindAddress, default 0.0.0.0)")
    parser.add_argument("--advertised-address", help="address clients use (advertisedAddress)")
    parser.add_argument("--rack", help="network location advertised for rack-aware placement (bookieRack)")
    add_log_level(parser)
    parser.add_argument(
        "--print-config", action="store_true",
        help="print the effective configuration, each key with where its value came from (default,"
        " file:line, BK_ variable, command line), and exit without starting",
    )
    add_json_option(parser, "with --print-config: print JSON")
    parser.set_defaults(func=run, parser=parser)


def add_dir_options(parser: argparse.ArgumentParser) -> None:
    """The directory flags, shared with ``shell bookieformat`` (which must find the same dirs)."""
    parser.add_argument("--journal-dirs", help="comma-separated journal directories (journalDirectories)")
    parser.add_argument("--ledger-dirs", help="comma-separated ledger directories (ledgerDirectories)")
    parser.add_argument(
        "--data-dir", type=Path, help="put the journal in DIR/journal and ledgers in DIR/ledgers"
    )


def dir_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The directory flags as BookKeeper configuration keys (explicit dirs win over --data-dir)."""
    overrides: dict[str, str] = {}
    if args.data_dir is not None:
        overrides["journalDirectories"] = str(args.data_dir / "journal")
        overrides["ledgerDirectories"] = str(args.data_dir / "ledgers")
    pairs = {"journalDirectories": args.journal_dirs, "ledgerDirectories": args.ledger_dirs}
    overrides.update({key: value for key, value in pairs.items() if value is not None})
    return overrides


def flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    """Command-line flags as BookKeeper configuration keys."""
    overrides = dir_overrides(args)
    pairs = {
        "zkServers": args.zk,
        "bookiePort": args.port,
        "bookieAddPort": args.add_port,
        "bindAddress": args.bind,
        "advertisedAddress": args.advertised_address,
        "bookieRack": args.rack,
    }
    overrides.update({key: str(value) for key, value in pairs.items() if value is not None})
    if args.http_port is not None:
        overrides["httpServerEnabled"] = "true"
        overrides["httpServerPort"] = str(args.http_port)
    return overrides


def run(args: argparse.Namespace) -> int:
    if args.json and not args.print_config:
        parser: argparse.ArgumentParser = args.parser
        parser.error("--json only applies to --print-config (the daemon logs, it prints no results)")
    limit_malloc_arenas()
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.conf, os.environ, flag_overrides(args))
        if args.print_config:
            rows = effective_settings(config)
            print(render_json(rows) if args.json else render_text(rows), end="" if not args.json else "\n")
            return 0
        if config.ignored:
            log.info("%s", ignored_line(config.ignored))
        bookie_main.registration_factory = BookiePresence.from_bookie_config  # cookie + registration
        return event_loop.run(run_daemon(config))
    except ConfigError as exc:
        print(f"pybk bookie: configuration error: {exc}", file=sys.stderr)
        return 2
