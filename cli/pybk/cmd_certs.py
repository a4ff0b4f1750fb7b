"""``pybk certs``: a throw-away CA and certificates for trying TLS (what ``pybk localcluster
--tls`` makes, for clusters it does not run, e.g. ``deploy/docker-compose.tls.yml``).

Writes to --dir: ca.pem; bookie.pem/.key (one certificate naming every --host, localhost and
127.0.0.1); client.pem/.key (identity "client", every right); rights (the
bookieAuthorizationFile); client.conf (for PYBK_CLIENT_CONF); bookie.conf (the bookie's TLS and
authentication keys, to append to bk_server.conf or give as BK_<key>). The CA's key is never
written: nothing more can be signed, so throw the directory away and make a new one to renew.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from pybk.help_text import description_from
from pybk.json_option import add_json_option
from pybk.localcluster.certs import make_cluster_tls


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "certs", help="make a throw-away CA and TLS certificates for a test cluster",
        description=description_from(__doc__),
    )
    parser.add_argument("--dir", type=Path, required=True, help="where the files go (created)")
    parser.add_argument("--host", action="append", default=[], metavar="NAME",
                        help="a name or IP address the bookies are reached at (repeatable)")
    parser.add_argument("--world-readable", action="store_true",
                        help="keys readable by every user (containers running as different users"
                             " share them through a volume; throw-away material only)")
    add_json_option(parser, "print the files made as one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tls = make_cluster_tls(args.dir, *args.host)
    (args.dir / "bookie.conf").write_text("".join(f"{k}={v}\n" for k, v in tls.bookie_settings.items()))
    if args.world_readable:
        for path in args.dir.iterdir():
            os.chmod(path, 0o644)
    if args.json:
        print(json.dumps({"dir": str(args.dir), "client_conf": str(tls.client_conf),
                          "files": sorted(path.name for path in args.dir.iterdir())}))
    else:
        print(f"certificates in {args.dir}: export PYBK_CLIENT_CONF={tls.client_conf}")
    return 0
