"""Entry point of ``pybk``. Each sub-command lives in its own module with a ``register`` function."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# Module names under ``pybk`` that each add one sub-command with ``register(subparsers)``.
COMMAND_MODULES: tuple[str, ...] = (
    "pybk.bench",
    "pybk.cmd_autorecovery",
    "pybk.cmd_bookie",
    "pybk.cmd_localcluster",
    "pybk.cmd_zookeeper",
    "pybk.shell",
    "pybk.cmd_verify",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pybk", description="pybookkeeper: Apache BookKeeper re-made in Python"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
