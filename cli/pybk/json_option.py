"""``--json`` wherever a command prints results, before or after its sub-command:
``pybk --json shell listbookies``, ``pybk shell --json listbookies`` and
``pybk shell listbookies --json`` mean the same.

argparse lets a sub-command's defaults overwrite what an outer parser already parsed, so every
level's ``--json`` has no default (``SUPPRESS``) and only the top-level parser sets ``json=False``.
A command that prints results marks itself ``json_capable``; ``pybk --json`` before one that does
not (a daemon) is a usage error rather than silently ignored."""

from __future__ import annotations

import argparse

JSON_HELP = "print one JSON object instead of text"


def add_json_option(parser: argparse.ArgumentParser, help_text: str = JSON_HELP) -> None:
    """``--json`` on a command (or a group of commands) that prints results."""
    existing = parser._option_string_actions.get("--json")
    if existing is not None:  # the command declared its own: keep its help, drop its default
        existing.default = argparse.SUPPRESS
    else:
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=help_text)
    parser.set_defaults(json_capable=True)


def add_top_level_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS,
        help=f"{JSON_HELP} (commands that print results; also accepted after the command)",
    )
    parser.set_defaults(json=False, json_capable=False)


def check_json_request(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 when ``--json`` was given to a command that prints no results."""
    if args.json and not args.json_capable:
        parser.error(f"--json: pybk {args.command} prints no results to format")
