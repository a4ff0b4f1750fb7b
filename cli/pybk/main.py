"""Entry point of ``pybk``. Each sub-command lives in its own module with a ``register`` function."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import Any

DISTRIBUTION = "bookkeeper-python"

# Module names under ``pybk`` that each add one sub-command with ``register(subparsers)``, and
# that sub-command's name (known without importing it: see ``_register_unavailable``).
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

# Packages of the ``server`` extra: a client-only install lacks them.
SERVER_EXTRA_MODULES = frozenset(
    {"rocksdict", "prometheus_client", "grpc_health", "grpc_reflection", "cryptography"}
)


def version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _register_unavailable(subparsers: Any, command: str, missing: str) -> None:
    """A command whose imports need the ``server`` extra, in a client-only install: it stays in
    ``--help`` and says what to install instead of failing with a traceback."""
    parser = subparsers.add_parser(command, help=f"(needs {DISTRIBUTION}[server])", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)

    def unavailable(_args: argparse.Namespace) -> int:
        print(
            f"pybk {command} needs the server extra (missing module {missing!r}): "
            f"pip install '{DISTRIBUTION}[server]'",
            file=sys.stderr,
        )
        return 2

    parser.set_defaults(func=unavailable)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pybk", description="pybookkeeper: Apache BookKeeper re-made in Python"
    )
    parser.add_argument("--version", action="version", version=f"pybk {version()} ({DISTRIBUTION})")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module, command in COMMAND_MODULES.items():
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] not in SERVER_EXTRA_MODULES:
                raise
            _register_unavailable(subparsers, command, exc.name)
            continue
        loaded.register(subparsers)
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
