"""Entry point of ``pybk``. Each sub-command lives in its own module with a ``register`` function."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence

from pybk.allocator import keep_large_buffers
from pybk.event_loop import EventLoopChoiceError, loop_factory
from pybk.extras import DISTRIBUTION, register_commands
from pybk.gc_setting import collect_young_garbage_less_often
from pybk.json_option import add_top_level_json_option, check_json_request
from pybk.stdio import complete_writes, open_standard_fds

# Module names under ``pybk`` that each add one sub-command with ``register(subparsers)``, and
# that sub-command's name (known without importing it: see :mod:`pybk.extras`).
COMMAND_MODULES: dict[str, str] = {
    "pybk.bench": "bench",
    "pybk.cmd_autorecovery": "autorecovery",
    "pybk.cmd_bookie": "bookie",
    "pybk.cmd_certs": "certs",
    "pybk.cmd_localcluster": "localcluster",
    "pybk.cmd_zookeeper": "zookeeper",
    "pybk.shell": "shell",
    "pybk.cmd_verify": "verify",
}

def version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pybk", description="pybookkeeper: Apache BookKeeper re-made in Python"
    )
    parser.add_argument("--version", action="version", version=f"pybk {version()} ({DISTRIBUTION})")
    add_top_level_json_option(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register_commands(subparsers, COMMAND_MODULES)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    open_standard_fds()  # pybk.stdio: before anything opens a descriptor of its own
    complete_writes()
    parser = build_parser()
    args = parser.parse_args(argv)
    check_json_request(parser, args)
    try:
        loop_factory()  # a bad PYBK_EVENT_LOOP is refused before the command starts anything
    except EventLoopChoiceError as exc:
        parser.error(str(exc))
    keep_large_buffers()  # before a command starts its threads and its hot path (pybk.allocator)
    collect_young_garbage_less_often()  # pybk.gc_setting
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``pybk shell readjournal 1 | head``): not an error of ours.
        # Python's own flush of stdout at exit would raise again, so stdout goes to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell pipeline reports a writer it cut short
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
