"""``pybk shell --zk HOSTS [--json] <command>``: BookKeeper's shell commands.

Each command is one module listed in :data:`SHELL_COMMANDS` with ``register(subparsers)`` that adds
its parser and sets ``run=`` to ``async def run(ctx: ShellContext, args) -> int``. Adding a command
is one module plus one line here. See :mod:`pybk.shell.context` for what a command gets.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
from typing import Any

from bkproto.errors import BKError
from bookie.config import ConfigError
from pybk import event_loop
from pybk.json_option import add_json_option
from pybk.shell.context import ShellContext, ZooKeeperUnreachableError
from pybk.shell.ledger_view import EXIT_USAGE

log = logging.getLogger(__name__)

SHELL_COMMANDS: tuple[str, ...] = (
    "pybk.shell.cmd_initnewcluster",
    "pybk.shell.cmd_nukeexistingcluster",
    "pybk.shell.cmd_listbookies",
    "pybk.shell.cmd_bookieinfo",
    "pybk.shell.cmd_clusterinfo",
    "pybk.shell.cmd_listledgers",
    "pybk.shell.cmd_ledgermetadata",
    "pybk.shell.cmd_readledger",
    "pybk.shell.cmd_simpletest",
    "pybk.shell.cmd_bookiesanity",
    "pybk.shell.cmd_deleteledger",
    "pybk.shell.cmd_lastmark",
    "pybk.shell.cmd_gcexplain",
    "pybk.shell.cmd_listunderreplicated",
    "pybk.shell.cmd_queryautorecoverystatus",
    "pybk.shell.cmd_recover",
    "pybk.shell.cmd_decommissionbookie",
    "pybk.shell.cmd_autorecovery",
    "pybk.shell.cmd_lostbookierecoverydelay",
    "pybk.shell.cmd_whoisauditor",
    "pybk.shell.cmd_triggeraudit",
    "pybk.shell.cmd_whatisinstanceid",
    "pybk.shell.cmd_fixzkacls",
    "pybk.shell.cmd_cookie_get",
    "pybk.shell.cmd_cookie_delete",
    "pybk.shell.cmd_bookieformat",
    "pybk.shell.cmd_localconsistencycheck",
    "pybk.shell.cmd_rebuild_locations_index",
    "pybk.shell.cmd_rebuild_ledgers_index",
    "pybk.shell.cmd_listfilesondisc",
    "pybk.shell.cmd_readjournal",
    "pybk.shell.cmd_readlog",
    "pybk.shell.cmd_readlogmetadata",
    "pybk.shell.cmd_listlogs",
    "pybk.shell.cmd_loggc",
    "pybk.shell.cmd_logtruncate",
)

EXIT_ZK_UNREACHABLE = 3
EXIT_CODES_HELP = """exit codes:
  0  success
  1  the operation failed (e.g. no such ledger, not enough bookies, a check failed)
  2  bad arguments or usage (e.g. unknown flag, a command that asks first without -f and no answer on stdin)
  3  ZooKeeper unreachable
  141  the reader of the output went away (e.g. `| head`)"""

# BookKeeper's key name, as for every BK_<key> override (design §6).
DEFAULT_ZK = os.environ.get("BK_zkServers", "127.0.0.1:2181")  # noqa: SIM112


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "shell", help="cluster administration commands (initnewcluster, listbookies, ...)",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--zk", help=f"ZooKeeper connect string (default {DEFAULT_ZK})")
    parser.add_argument("--ledgers-root", default="/ledgers", help="ledgers root znode (default /ledgers)")
    add_json_option(parser)
    commands = parser.add_subparsers(dest="shell_command", required=True, metavar="COMMAND")
    for name in SHELL_COMMANDS:
        importlib.import_module(name).register(commands)
    for command in commands.choices.values():  # every command prints through ShellContext.emit
        add_json_option(command)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # kazoo logs every refused connection attempt; the shell reports the outcome itself (exit 3).
    logging.getLogger("kazoo.client").setLevel(logging.CRITICAL)
    return event_loop.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    ctx = ShellContext(zk_hosts=args.zk or DEFAULT_ZK, ledgers_root=args.ledgers_root, as_json=args.json,
                       zk_given=args.zk is not None)
    try:
        return int(await args.run(ctx, args) or 0)
    except ZooKeeperUnreachableError as e:
        ctx.error(f"{args.shell_command}: {e}")
        return EXIT_ZK_UNREACHABLE
    except BKError as e:
        ctx.error(f"{args.shell_command}: {e}")
        return 1
    except ConfigError as e:  # the bookie configuration of the commands that work on its files
        ctx.error(f"{args.shell_command}: configuration error: {e}")
        return EXIT_USAGE
    finally:
        await ctx.close()


__all__ = ["SHELL_COMMANDS", "ShellContext", "register"]


