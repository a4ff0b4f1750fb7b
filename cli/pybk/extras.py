"""Commands whose imports need an optional extra: in an install without it, the command stays in
``--help`` and says what to install, instead of ``pybk`` failing with a traceback at start."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping
from typing import Any

DISTRIBUTION = "bookkeeper-python"

# Top-level modules of the extras a command's imports may need (verify checks for matplotlib itself).
EXTRA_OF_MODULE: Mapping[str, str] = {
    "rocksdict": "server",
    "prometheus_client": "server",
    "grpc_health": "server",
    "grpc_reflection": "server",
    "cryptography": "server",
    "aiohttp": "server",
    "hdrh": "server",
    "tqdm": "server",
    "pyspark": "spark",
    "pyarrow": "spark",
}


def register_commands(subparsers: Any, modules: Mapping[str, str]) -> None:
    """``register(subparsers)`` of each module (module name -> command name), or a stand-in that
    names the missing extra when the module's imports need one that is not installed."""
    for module, command in modules.items():
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
            if extra is None:
                raise
            _register_unavailable(subparsers, command, extra, exc.name or "")
            continue
        loaded.register(subparsers)


def _register_unavailable(subparsers: Any, command: str, extra: str, missing: str) -> None:
    parser = subparsers.add_parser(command, help=f"(needs {DISTRIBUTION}[{extra}])", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)

    def unavailable(_args: argparse.Namespace) -> int:
        print(
            f"pybk {command} needs the {extra} extra (missing module {missing!r}): "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            file=sys.stderr,
        )
        return 2

    parser.set_defaults(func=unavailable)
