"""``pybk bench bookie``: adds straight to one bookie over one AddEntries stream (BookKeeper's
BenchBookie): no ledger metadata, no client write handle, the messages the client sends.

Three phases on fresh ledgers:

1. warm-up: ``--warmup`` entries, pipelined, not reported;
2. throughput: ``--entries`` entries pipelined over one stream, ``--batch`` entries per message and
   at most ``--window`` entries outstanding; each entry's latency is from its message being sent
   to the message's answer;
3. latency: ``--latency-entries`` entries with a single add outstanding (one entry per message).

``--wire`` chooses the messages (``bench.bookie_adds``): ``packed`` (default) as the client
library sends them, ``per-add`` the bench's earlier form. ``--transport`` chooses the stream: the
bookie's add port, as the client uses it when the bookie has one, or gRPC. ``auto`` (default) takes
the add port when it is known: ``--add-port PORT`` (on the host of ``--bookie``), or the bookie's
registration read from ZooKeeper with ``--zk``; gRPC otherwise. TLS and a token come from
``PYBK_CLIENT_CONF`` / ``BK_<key>`` (``bkclient.tls``) on either transport. The report is the
throughput phase; the latency phase is added as ``single_add_latency_ms`` (same percentiles),
and ``wire``, ``transport`` and ``target`` say what ran.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
import grpc.aio

from bkclient.add_port_call import AddPortCall, ClosedBeforeAnswering
from bkclient.tls import ClientSecurity, security_from_environ
from bkmeta.metadata_client import MetadataClient
from bkproto.errors import BKError
from pybk import event_loop
from pybk.arg_types import non_negative, positive, tcp_port
from pybk.bench.bookie_adds import (
    PACKED,
    WIRES,
    AddCall,
    AddMessages,
    PipelinedAdds,
    grpc_add_calls,
    single_adds,
)
from pybk.bench.plot import add_plot_option, print_and_plot
from pybk.bench.report import BenchResult, summary_ms
from pybk.progress import Progress

MiB = 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 16 * MiB),
    ("grpc.max_receive_message_length", 16 * MiB),
]
ADD_PORT = "add-port"
GRPC = "grpc"
AUTO = "auto"
EXIT_USAGE = 2  # a combination of options that cannot run, as argparse's own usage errors


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bookie", help="add throughput and latency of one bookie (like BookKeeper's BenchBookie)"
    )
    parser.add_argument("--bookie", required=True,
                        help="HOST:PORT of the bookie's gRPC port (with --zk: or its bookie id)")
    parser.add_argument("--entries", type=positive, default=100_000, help="entries in the throughput phase")
    parser.add_argument("--size", type=positive, default=1024, help="payload bytes per entry")
    parser.add_argument("--window", type=positive, default=10_000, help="max entries outstanding")
    parser.add_argument("--batch", type=positive, default=500, help="max entries per stream message")
    parser.add_argument("--latency-entries", type=non_negative, default=2000, help="single-outstanding adds")
    parser.add_argument("--warmup", type=non_negative, default=2000, help="warm-up entries (not reported)")
    parser.add_argument("--wire", choices=WIRES, default=PACKED,
                        help="packed (default): one PackedAdds group per message, successes answered "
                        "as a count, as the client sends; per-add: one AddRequest per add, a result each")
    parser.add_argument("--transport", choices=(AUTO, ADD_PORT, GRPC), default=AUTO,
                        help="the stream: the bookie's add port, or gRPC's AddEntries; auto (default): "
                        "the add port when known (--add-port or --zk), else gRPC")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--add-port", type=tcp_port, default=None,
                       help="the bookie's add port, on the host of --bookie")
    where.add_argument("--zk", default=None,
                       help="ZooKeeper connect string: find the bookie's add port in its registration")
    add_plot_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return event_loop.run(_bench(args))


class SetupError(Exception):
    """The options cannot run against this bookie; the message says why."""


class Target(NamedTuple):
    """Where the adds go: ``transport`` and its ``address`` (``host:port``)."""

    transport: str
    address: str


async def _registered_add_port(args: argparse.Namespace, tls: bool) -> tuple[str, str | None]:
    """The gRPC address and the add port's ``host:port`` (None: none) that the bookie named by
    ``--bookie`` (its id or gRPC address) registered in ``--zk``; ``tls``: whether we speak it."""
    async with await MetadataClient.connect(args.zk, require_cluster=False) as meta:
        bookies = meta.bookie_watcher.all_bookies()
    for bookie_id, info in sorted(bookies.items()):
        if args.bookie in (bookie_id, info.grpc_target):
            if info.tls and not tls:
                raise SetupError(f"bookie {bookie_id} accepts only TLS: name the client configuration"
                                 " in PYBK_CLIENT_CONF (or set BK_clientTrustStore)")
            return info.grpc_target, info.add_target
    names = ", ".join(sorted(bookies)) or "none"
    raise SetupError(f"{args.bookie} is not registered in ZooKeeper {args.zk} (registered: {names})")


async def choose_target(args: argparse.Namespace, tls: bool = False) -> Target:
    """The transport and address that ``--transport``, ``--add-port`` and ``--zk`` ask for
    (``tls``: whether the bench speaks TLS); :class:`SetupError` for what cannot run."""
    if args.transport == GRPC and args.add_port is not None:
        raise SetupError("--add-port names the add port, but --transport grpc does not use it")
    grpc_address, add_address = args.bookie, None
    if args.add_port is not None:
        host, _, _ = args.bookie.rpartition(":")
        add_address = f"{host or args.bookie}:{args.add_port}"
    elif args.zk is not None:
        grpc_address, add_address = await _registered_add_port(args, tls)
        if add_address is None and args.transport == ADD_PORT:
            raise SetupError(f"{args.bookie} registered no add port in ZooKeeper {args.zk}")
    if args.transport == ADD_PORT and add_address is None:
        raise SetupError("--transport add-port needs the add port: --add-port PORT, or --zk to find it "
                         "in the bookie's registration")
    if args.transport != GRPC and add_address is not None:
        return Target(ADD_PORT, add_address)
    return Target(GRPC, grpc_address)


def _grpc_channel(address: str, security: ClientSecurity | None) -> grpc.aio.Channel:
    if security is not None and security.tls:
        return grpc.aio.secure_channel(address, security.grpc_credentials(), options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


async def _run_phases(args: argparse.Namespace, open_call: Callable[[], AddCall]) -> BenchResult:
    payload = os.urandom(args.size)
    base = random.randrange(1 << 40, 1 << 50)
    if args.warmup:
        await PipelinedAdds(open_call, args.window, args.batch).run(
            AddMessages(args.wire, base, payload), args.warmup
        )
    adds = PipelinedAdds(open_call, args.window, args.batch)
    with Progress(args.entries, quiet=args.json) as progress:
        elapsed = await adds.run(AddMessages(args.wire, base + 1, payload), args.entries, progress)
    single, single_answers = await single_adds(
        open_call, AddMessages(args.wire, base + 2, payload), args.latency_entries
    )
    answers = adds.answers
    result = BenchResult(
        entries=answers.acked,
        errors=answers.errors,
        elapsed_s=elapsed,
        entry_size=args.size,
        latencies=adds.latencies,
        extra={
            "window": args.window,
            "batch": min(args.batch, args.window),
            "single_add_latency_ms": summary_ms(single.histogram),
            "single_add_errors": single_answers.errors,
            # the ledgers written, to read back or delete: warm-up, throughput, latency phase
            "ledger_ids": [base, base + 1, base + 2],
        },
    )
    first_error = answers.first_error or single_answers.first_error
    if first_error:
        result.extra["first_error"] = first_error
    return result


async def _bench(args: argparse.Namespace) -> int:
    security = security_from_environ()  # a TLS bookie: PYBK_CLIENT_CONF / BK_<key> (bkclient.tls)
    try:
        target = await choose_target(args, security is not None and security.tls)
    except SetupError as exc:
        print(f"pybk bench bookie: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BKError as exc:  # ZooKeeper out of reach (--zk)
        print(f"pybk bench bookie: {exc}", file=sys.stderr)
        return 1
    try:
        if target.transport == ADD_PORT:
            # No gRPC call to fall back on: an add port out of reach fails the bench, which
            # must not report gRPC's figures as the add port's.
            result = await _run_phases(
                args, lambda: AddPortCall(args.bookie, target.address, None, security=security)
            )
        else:
            async with _grpc_channel(target.address, security) as channel:
                try:
                    await asyncio.wait_for(channel.channel_ready(), 10)
                except TimeoutError:
                    print(f"pybk bench bookie: cannot connect to {target.address}", file=sys.stderr)
                    return 1
                result = await _run_phases(args, grpc_add_calls(channel))
    except ClosedBeforeAnswering as exc:
        print(f"pybk bench bookie: {exc}: is it the bookie's add port?", file=sys.stderr)
        return 1
    except (BKError, grpc.aio.AioRpcError, RuntimeError, OSError) as exc:
        print(f"pybk bench bookie: {target.transport} {target.address}: {exc}", file=sys.stderr)
        return 1
    except EOFError as exc:  # asyncio.IncompleteReadError: a frame cut short
        print(f"pybk bench bookie: {target.transport} {target.address} closed the connection inside an"
              f" answer ({exc}): is it the bookie's add port?", file=sys.stderr)
        return 1
    result.extra.update({"wire": args.wire, "transport": target.transport, "target": target.address})
    print_and_plot(result, args, f"bench bookie {target.address} ({args.wire} over {target.transport})")
    failed = result.errors + result.extra["single_add_errors"]
    return 0 if failed == 0 else 1
