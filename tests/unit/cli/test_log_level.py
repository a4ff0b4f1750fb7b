"""``--log-level`` of the daemons: any case of a logging level, anything else exit code 2."""

from __future__ import annotations

import pytest

from pybk.main import build_parser


@pytest.mark.parametrize("command", ["bookie", "autorecovery"])
def test_log_level_is_checked(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([command, "--log-level", "debug"]).log_level == "DEBUG"
    with pytest.raises(SystemExit) as info:
        parser.parse_args([command, "--log-level", "loud"])
    assert info.value.code == 2
    assert "'loud' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in capsys.readouterr().err
