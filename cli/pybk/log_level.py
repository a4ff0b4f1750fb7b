"""The ``--log-level`` option of the daemons: checked by argparse, so a wrong level is exit code 2
with a message rather than a traceback from ``logging``."""

from __future__ import annotations

import argparse

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    level = text.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LEVELS)} (any case)")
    return level


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level", type=log_level, default="INFO",
        help=f"logging level: {', '.join(LEVELS)} (default INFO)",
    )
