"""argparse ``type=`` functions for numbers with bounds: a value out of bounds is a usage error
(exit code 2 with argparse's message), like a value that is no number at all, rather than a check
after parsing that each command would word and exit on differently."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TypeVar

_Number = TypeVar("_Number", int, float)


def _require(value: _Number, holds: bool, bound: str, text: str) -> _Number:
    if not holds:
        raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    return _require(value, value >= 0, ">= 0", text)


def positive(text: str) -> int:
    value = int(text)
    return _require(value, value >= 1, ">= 1", text)


def _finite(text: str) -> float:
    value = float(text)
    return _require(value, math.isfinite(value), "a finite number", text)


def positive_float(text: str) -> float:
    value = _finite(text)
    return _require(value, value > 0, "> 0", text)


def non_negative_float(text: str) -> float:
    value = _finite(text)
    return _require(value, value >= 0, ">= 0", text)


def tcp_port(text: str) -> int:
    value = int(text)
    return _require(value, 1 <= value <= 65535, "a TCP port, 1 to 65535", text)


def tcp_port_or_any(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    value = int(text)
    return _require(value, 0 <= value <= 65535, "a TCP port, 0 (any) to 65535", text)


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path
