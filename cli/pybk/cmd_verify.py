"""``pybk verify``: break a real cluster at random and check that nothing acknowledged is lost."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pybk import event_loop
from pybk.arg_types import positive, positive_float, tcp_port
from pybk.json_option import add_json_option
from pybk.localcluster.cluster import StartupError
from pybk.localcluster.layout import ClusterLayout, LayoutError
from pybk.verify.nemesis import ALL_KINDS
from pybk.verify.report import plot
from pybk.verify.run import VerifyOptions, run_verify
from pybk.verify.workers import WorkloadOptions

EXIT_VIOLATION = 1
EXIT_USAGE = 2

DESCRIPTION = """\
Start a real ZooKeeper and N bookies (as `pybk localcluster` does), run writer, recovery-opener
and tailing-reader processes against them, and break things at random from --seed: kill -9 and
restart of bookies, writers and ZooKeeper, SIGSTOP/SIGCONT pauses, ZooKeeper session expiry of a
bookie and of a writer, partitions and slow links (a TCP proxy on each link), a full disk (a
small tmpfs under bookie 0's ledger directory; root only). Every fault heals; afterwards every
ledger is read back through a fresh client (open ledgers with recovery) and the whole history is
checked: nothing acknowledged lost, closed ledgers end at or after their last acknowledged entry,
readers agree, fenced writers get no acknowledgement past the fence, tailing readers see a
gap-free prefix, no process crashed or logged a traceback, the cluster heals within --heal-timeout.

With --zk HOST:PORT no cluster is started and nothing is broken: the workload runs against that
cluster (while its operator restarts or replaces things) and the same checks report the outcome.

Exit codes: 0 no violation, 1 a violation (the report says which, with the seed, the fault
timeline and the history around it), 2 bad arguments or the cluster could not start.
"""


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "verify", help="inject faults into a real cluster and check nothing acknowledged is lost",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--time", type=positive_float, default=None, metavar="S",
                        help="run for S seconds (default 60)")
    amount.add_argument("--rounds", type=positive, default=None, metavar="N", help="run N fault schedules")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of every random choice (default: random, printed)")
    parser.add_argument("--bookies", type=positive, default=3, metavar="N",
                        help="bookies to start (default 3)")
    parser.add_argument("--zk-port", type=tcp_port, default=2281, metavar="PORT",
                        help="ZooKeeper port (default 2281)")
    parser.add_argument("--base-port", type=tcp_port, default=3281, metavar="PORT",
                        help="first bookie's gRPC port (default 3281; HTTP +100, add port +200)")
    parser.add_argument("--zk", default=None, metavar="HOST:PORT",
                        help="check an existing cluster instead: no cluster started, no faults injected")
    parser.add_argument("--faults", default=",".join(ALL_KINDS), metavar="KINDS",
                        help="comma-separated fault kinds to draw from (default: all of "
                             + ", ".join(ALL_KINDS) + ")")
    parser.add_argument("--writers", type=positive, default=2, metavar="N",
                        help="writer processes (default 2)")
    parser.add_argument("--quorums", default=WorkloadOptions.quorums, metavar="E/Qw/Qa,...",
                        help=f"ledger shapes writers draw from (default {WorkloadOptions.quorums})")
    parser.add_argument("--rate", type=positive_float, default=100.0, metavar="R",
                        help="appends a second per writer, at most (default 100)")
    parser.add_argument("--recover-every", type=positive_float, default=4.0, metavar="S",
                        help="mean seconds between recovery opens racing the writers (default 4)")
    parser.add_argument("--heal-timeout", type=positive_float, default=60.0, metavar="S",
                        help="how long the cluster may take to be healthy after faults heal (default 60)")
    parser.add_argument("--data-dir", type=Path, default=None, metavar="D",
                        help="keep data, logs and histories here (default: a temporary directory, removed)")
    add_json_option(parser, "print the summary as one JSON object")
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                        help="draw throughput and latency over time with the faults marked")
    parser.set_defaults(func=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo.client").setLevel(logging.CRITICAL)
    parser: argparse.ArgumentParser = args.parser
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds:
        parser.error(f"--faults: unknown kind(s) {', '.join(unknown)}; known: {', '.join(ALL_KINDS)}")
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        # Said before the run, not after it.
        print("pybk verify: error: --plot needs matplotlib: pip install 'bookkeeper-python[verify]'",
              file=sys.stderr)
        return EXIT_USAGE
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"pybk verify: seed {seed}", file=sys.stderr, flush=True)
    temporary = args.data_dir is None
    remove_data = temporary  # a temporary directory is kept after a violation: it is the evidence
    data_dir = Path(tempfile.mkdtemp(prefix="pybk-verify-")) if temporary else args.data_dir.resolve()
    options = VerifyOptions(
        seed=seed, data_dir=data_dir,
        duration_s=args.time if args.time is not None or args.rounds is not None else 60.0,
        rounds=args.rounds, bookies=args.bookies, zk_port=args.zk_port, base_port=args.base_port,
        zk=args.zk, kinds=kinds, heal_timeout_s=args.heal_timeout,
        workload=WorkloadOptions(writers=args.writers, quorums=args.quorums, rate=args.rate,
                                 recover_every_s=args.recover_every),
    )
    try:
        if args.zk is None:
            try:
                layout = ClusterLayout(data_dir=data_dir, bookies=args.bookies, zk_port=args.zk_port,
                                       base_port=args.base_port)
            except LayoutError as exc:
                print(f"pybk verify: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            busy = layout.busy_ports()
            if busy:
                print(f"pybk verify: error: port(s) {', '.join(map(str, busy))} already in use "
                      "(pick --zk-port/--base-port)", file=sys.stderr)
                return EXIT_USAGE
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            report = event_loop.run(run_verify(options, sys.stderr, progress=True))
        except StartupError as exc:
            print(f"pybk verify: the cluster could not start: {exc}", file=sys.stderr)
            return EXIT_USAGE
        report.print(args.json, sys.stdout)
        if args.plot is not None:
            plot(report, args.plot)
            print(f"plot written to {args.plot}", file=sys.stderr)
        if not report.ok:
            remove_data = False
        if not remove_data:
            print(f"data, logs and histories in {data_dir}", file=sys.stderr)
        return 0 if report.ok else EXIT_VIOLATION
    finally:
        if remove_data:
            shutil.rmtree(data_dir, ignore_errors=True)
