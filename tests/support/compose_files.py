"""The compose files in ``deploy/`` as data, and the ``pybk`` command lines of their services
parsed as the containers' ``ENTRYPOINT ["pybk"]`` would parse them (for the compose file tests)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import yaml

from pybk.main import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE_BOOKIES = ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]


def load_deploy_yaml(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(data, dict)
    return data


def service_pybk_args(service: dict[str, Any]) -> list[str]:
    """A service's ``command``: the arguments its container gives ``pybk``."""
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def parse_pybk(argv: list[str]) -> argparse.Namespace:
    """Parse like the container's ENTRYPOINT ["pybk"] would; argparse exits on an unknown flag."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # pragma: no cover - the assertion message is the point
        raise AssertionError(f"`pybk {shlex.join(argv)}` is rejected by pybk's parser") from exc
