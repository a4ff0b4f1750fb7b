"""Walks ``pybk``'s argparse tree, for tests that check every command's parser the same way."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pybk import arg_types
from pybk.shell.ledger_view import bookie_id

# A valid value for each argparse ``type`` the commands use (argparse's own: str when None).
SAMPLE_BY_TYPE: dict[object, str] = {
    None: "x", str: "x", int: "1", float: "1.5", Path: "/tmp",
    arg_types.positive: "1", arg_types.non_negative: "0",
    arg_types.positive_float: "1.5", arg_types.non_negative_float: "0",
    arg_types.existing_dir: "/tmp", bookie_id: "127.0.0.1:3181",
    arg_types.tcp_port: "3181", arg_types.tcp_port_or_any: "0",
}
# Values each numeric type refuses (argparse exits 2).
BAD_BY_TYPE: dict[object, tuple[str, ...]] = {
    int: ("many",), float: ("many",),
    arg_types.positive: ("0", "-1", "many"), arg_types.non_negative: ("-1", "many"),
    arg_types.positive_float: ("0", "-0.5", "nan", "many"),
    arg_types.non_negative_float: ("-1", "inf", "many"),
    arg_types.tcp_port: ("0", "65536", "many"), arg_types.tcp_port_or_any: ("-1", "65536", "many"),
}


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]  # e.g. ("shell", "listbookies")
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(self.path)


def sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def every_parser(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every parser of the tree, the top level first."""
    yield Command(path, parser)
    for name, child in sub_commands(parser).items():
        yield from every_parser(child, (*path, name))


def leaf_commands(parser: argparse.ArgumentParser) -> list[Command]:
    return [c for c in every_parser(parser) if c.path and not sub_commands(c.parser)]


def sample_value(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type not in SAMPLE_BY_TYPE:
        raise LookupError(f"{action.dest}: add a valid sample of type {action.type!r} to SAMPLE_BY_TYPE")
    return SAMPLE_BY_TYPE[action.type]


def required_argv(parser: argparse.ArgumentParser) -> list[str]:
    """The fewest arguments that parse: every required option and positional, one option of
    each required mutually exclusive group."""
    argv: list[str] = []
    grouped = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv += [first.option_strings[0], *([] if first.nargs == 0 else [sample_value(first)])]
    for action in parser._actions:
        if action in grouped or isinstance(action, argparse._SubParsersAction):
            continue
        if not action.option_strings:
            if action.nargs in ("?", "*", argparse.REMAINDER):
                continue
            argv += [sample_value(action)] * (action.nargs if isinstance(action.nargs, int) else 1)
        elif action.required:
            argv += [action.option_strings[0], sample_value(action)]
    return argv


def typed_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options whose type refuses some values (see BAD_BY_TYPE)."""
    return [a for a in parser._actions if a.option_strings and a.type in BAD_BY_TYPE]
