"""The directories of the bookie on this host, for the shell commands that work on its files
(``bookieformat``, ``localconsistencycheck``, the index rebuilds): found from the same ``--conf``
file, ``BK_<key>`` variables and directory flags as ``pybk bookie``."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bookie.config import load_config
from pybk.cmd_bookie import add_dir_options, dir_overrides

Report = TypeVar("Report")


@dataclass(frozen=True)
class BookieDirs:
    journal_dirs: tuple[Path, ...]
    ledger_dirs: tuple[Path, ...]
    zk_servers: str | None  # the bookie's ZooKeeper (zkServers); None: it runs unregistered

    @property
    def all(self) -> list[Path]:
        """Every directory once (a journal may share a ledger directory)."""
        return list(dict.fromkeys((*self.journal_dirs, *self.ledger_dirs)))


def add_bookie_dir_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", type=Path, help="the bookie's bk_server.conf-style file")
    add_dir_options(parser)


def bookie_dirs(args: argparse.Namespace) -> BookieDirs:
    """The bookie's directories, resolved; ``ConfigError`` as ``pybk bookie`` would report it."""
    config = load_config(args.conf, os.environ, dir_overrides(args))
    return BookieDirs(
        tuple(d.resolve() for d in config.journal_dirs),
        tuple(d.resolve() for d in config.ledger_dirs),
        config.zk_servers,
    )


async def for_each_ledger_dir(
    dirs: BookieDirs, work: Callable[[int, Path], Report]
) -> tuple[list[Report], dict[str, str]]:
    """``work(index, directory)`` on a thread for each ledger directory in turn: the reports, and
    why each directory that raised OSError (in use, a disk error, ...) was not done; the next
    may still be."""
    reports: list[Report] = []
    failures: dict[str, str] = {}
    for index, directory in enumerate(dirs.ledger_dirs):
        try:
            reports.append(await asyncio.to_thread(work, index, directory))
        except OSError as exc:
            failures[str(directory)] = str(exc)
    return reports, failures
