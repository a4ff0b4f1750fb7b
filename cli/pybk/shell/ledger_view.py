"""Shared by the client-based shell commands (listledgers, ledgermetadata, readledger, simpletest,
bookiesanity, deleteledger): a client on the shell's metadata session, and one way to show ledger
metadata and entries, as JSON-ready dicts and as text lines.

Passwords are never printed (``has_password`` only), as BookKeeper's ``toSafeString`` does;
``metadata_dict`` is :mod:`bkclient.admin_views`' (the HTTP admin API answers it too).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from collections.abc import Mapping
from typing import Any

from bkclient import BookKeeper, ClientConfig, IncorrectParameterError, LedgerEntry
from bkclient.admin import check_bookie_id
from bkclient.context import ClientContext
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext

# Exit codes every shell command uses (documented in ``pybk shell --help``).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# How much of an entry the text output shows; --json always carries the whole entry.
TEXT_PREVIEW_BYTES = 64


async def shell_client(ctx: ShellContext, config: ClientConfig | None = None) -> BookKeeper:
    """A client sharing the shell's ZooKeeper session; close it (``async with``) before the shell
    closes the session."""
    meta = await ctx.metadata()
    return BookKeeper(ClientContext.create(meta, config or ClientConfig()), owns_metadata=False)


async def ask(question: str) -> str | None:
    """The user's answer on stdin (stripped, lower case), or None when stdin has none to give
    (closed, /dev/null, a script without input)."""
    if sys.stdin is None or sys.stdin.closed:
        return None
    print(f"{question} (y/N) ", end="", file=sys.stderr, flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.strip().lower() if line else None


async def refused(
    ctx: ShellContext, question: str, no_answer: str, declined: tuple[dict[str, Any], str]
) -> int | None:
    """Ask ``question``; None when the user agreed, else the exit code to return: 2 with the
    ``no_answer`` error when stdin gives no answer (pass -f in scripts), 1 after emitting
    ``declined`` (JSON, text) when the user says no."""
    answer = await ask(question)
    if answer is None:
        return usage_error(ctx, no_answer)
    if answer not in ("y", "yes"):
        ctx.emit(*declined)
        return EXIT_FAILED
    return None


def usage_error(ctx: ShellContext, message: str) -> int:
    """A bad argument value found after parsing: same exit code as argparse's own errors."""
    ctx.error(message)
    return EXIT_USAGE


def bookie_id(text: str) -> str:
    """argparse type of a bookie id: ``host:port``, or a usage error (exit 2) naming the value."""
    try:
        check_bookie_id(text)
    except IncorrectParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_rate_option(parser: argparse.ArgumentParser) -> None:
    """``--rate-bytes``: BookKeeper's replicationRateByBytes for one command."""
    parser.add_argument("--rate-bytes", type=non_negative, default=0, metavar="N",
                        help="copy at most N bytes of entries per second (BookKeeper's"
                             " replicationRateByBytes; default 0: no limit)")


def metadata_lines(data: Mapping[str, Any]) -> list[str]:
    lines = [
        f"ledgerID: {data['ledger_id']}",
        f"  state: {data['state']}  lastEntryId: {data['last_entry_id']}  length: {data['length']}",
        f"  ensembleSize: {data['ensemble_size']}  writeQuorumSize: {data['write_quorum_size']}"
        f"  ackQuorumSize: {data['ack_quorum_size']}",
        f"  digestType: {data['digest_type']}  password: {'set' if data['has_password'] else 'none'}"
        f"  ctime: {data['ctime_iso']}",
    ]
    for key, value in data["custom_metadata"].items():
        lines.append(f"  customMetadata: {key}={value}")
    for segment in data["segments"]:
        lines.append(f"  ensemble from entry {segment['first_entry_id']}: {', '.join(segment['bookies'])}")
    return lines


def entry_dict(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "entry_id": entry.entry_id,
        "length": len(entry.data),
        "data_base64": base64.b64encode(entry.data).decode(),
    }


def entry_line(entry: LedgerEntry) -> str:
    preview = entry.data[:TEXT_PREVIEW_BYTES]
    try:
        shown = preview.decode("utf-8")
        if not shown.isprintable():
            raise ValueError
        shown = repr(shown)
    except ValueError:
        shown = preview.hex()
    more = " ..." if len(entry.data) > TEXT_PREVIEW_BYTES else ""
    return f"entry {entry.entry_id} ({len(entry.data)} bytes): {shown}{more}"
