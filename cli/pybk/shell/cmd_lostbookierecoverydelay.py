"""``lostbookierecoverydelay (-g | -s SECONDS)``: read or set the cluster's lostBookieRecoveryDelay,
how long a bookie must be gone before autorecovery re-replicates its data (BookKeeper's shell
command, and the same ZooKeeper znode). The leading autorecovery takes a new value at once: the
bookies it is waiting for wait the new delay from now. Setting 0, or the value it already has
(what ``triggeraudit`` does), starts every pending recovery now. Before any autorecovery has led,
the cluster has no value and each uses its configuration's."""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta.replication_control import MAX_DELAY_S
from pybk.shell.context import ShellContext


def _delay_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 0 <= value <= MAX_DELAY_S:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_DELAY_S} seconds, got {value}")
    return value


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "lostbookierecoverydelay", help="read or set how long a bookie is gone before its data is copied"
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("-g", "--get", action="store_true", help="print the delay")
    action.add_argument("-s", "--set", type=_delay_seconds, metavar="SECONDS", help="set the delay")
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    control = (await ctx.metadata(watch_bookies=False)).replication_control
    if args.set is not None:
        await control.set_lost_bookie_delay(args.set)
        ctx.emit({"lost_bookie_recovery_delay_s": args.set, "changed": True},
                 f"lostBookieRecoveryDelay set to {args.set} s")
        return 0
    delay = await control.lost_bookie_delay()
    text = (f"lostBookieRecoveryDelay: {delay} s" if delay is not None else
            "lostBookieRecoveryDelay: not set in the cluster yet (each autorecovery uses its"
            " configured value, and the first leader writes it here)")
    ctx.emit({"lost_bookie_recovery_delay_s": delay, "changed": False}, text)
    return 0
