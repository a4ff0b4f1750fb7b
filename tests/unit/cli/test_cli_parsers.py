"""Every ``pybk`` command's parser, walked: ``--json`` wherever a command prints results (before
or after its sub-command), exit code 2 for every bad argument (argparse's own errors and the
commands' own checks), ``--version``, and ``--help`` text without markup."""

from __future__ import annotations

import argparse
import re

import pytest
from tests.support.cli_parsers import (
    BAD_BY_TYPE,
    Command,
    every_parser,
    leaf_commands,
    required_argv,
    typed_options,
)

from pybk.main import build_parser, main

PARSER = build_parser()
LEAVES = leaf_commands(PARSER)
# Commands that run daemons or clusters and print no results of their own.
NO_RESULTS = {"autorecovery", "localcluster", "zookeeper"}
RESULT_LEAVES = [c for c in LEAVES if c.path[0] not in NO_RESULTS]
MARKUP = re.compile(r"``|:(class|mod|func|meth|data):|\*\*|\x1b\[|\[/?(bold|red|green|dim)\]")


def ids(commands: list[Command]) -> list[str]:
    return [c.name for c in commands]


def exit_code(argv: list[str]) -> int | str | None:
    with pytest.raises(SystemExit) as info:
        PARSER.parse_args(argv)
    return info.value.code


def test_the_walk_finds_every_command_group() -> None:
    paths = {c.path[:1] for c in LEAVES}
    assert {("bench",), ("shell",), ("bookie",), ("verify",), ("certs",)} <= paths
    assert len([c for c in LEAVES if c.path[0] == "shell"]) >= 30
    assert len([c for c in LEAVES if c.path[0] == "bench"]) >= 8


@pytest.mark.parametrize("command", RESULT_LEAVES, ids=ids(RESULT_LEAVES))
def test_json_before_or_after_the_sub_command(command: Command) -> None:
    required = required_argv(command.parser)
    path = list(command.path)
    placements = [["--json", *path, *required], [*path, *required, "--json"]]
    if len(path) > 1:
        placements.append([path[0], "--json", *path[1:], *required])
    for argv in placements:
        assert PARSER.parse_args(argv).json is True, argv
    assert PARSER.parse_args([*path, *required]).json is False


@pytest.mark.parametrize("command", [c for c in LEAVES if c.path[0] in NO_RESULTS],
                         ids=ids([c for c in LEAVES if c.path[0] in NO_RESULTS]))
def test_json_before_a_daemon_is_a_usage_error(command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--json", *command.path, *required_argv(command.parser)])
    assert info.value.code == 2
    assert "prints no results" in capsys.readouterr().err


@pytest.mark.parametrize("command", LEAVES, ids=ids(LEAVES))
def test_bad_arguments_exit_2(command: Command) -> None:
    required = required_argv(command.parser)
    path = list(command.path)
    assert exit_code([*path, *required, "--no-such-option"]) == 2
    for action in typed_options(command.parser):
        for bad in BAD_BY_TYPE[action.type]:
            option = action.option_strings[-1]
            assert exit_code([*path, *required, option, bad]) == 2, (option, bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["bookie", "--json"],  # --json without --print-config
        ["shell", "simpletest", "-e", "1", "-w", "2", "-a", "2"],
        ["shell", "readledger", "-l", "1", "-fe", "5", "-le", "2"],
        ["bench", "journal-disk", "--dir", "/no/such/dir"],
        ["bench", "journal-disk", "--dir", "/tmp", "--size", str(1 << 40)],
        ["verify", "--faults", "no-such-fault"],
    ],
)
def test_the_commands_own_checks_exit_2(argv: list[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--version"]) == 0
    assert re.fullmatch(r"pybk \S+ \(bookkeeper-python\)\n", capsys.readouterr().out)


@pytest.mark.parametrize("command", list(every_parser(PARSER)), ids=lambda c: c.name or "pybk")
def test_help_has_no_markup(command: Command) -> None:
    text = command.parser.format_help()
    assert not MARKUP.search(text), [m.group(0) for m in MARKUP.finditer(text)]


def test_parsers_share_one_namespace_type() -> None:
    assert isinstance(PARSER.parse_args(["shell", "listbookies"]), argparse.Namespace)
