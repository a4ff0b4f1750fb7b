"""``bookiesanity [-b BOOKIE] [-e 10] [-t 30]``: write and read back a few entries on one bookie.

Like BookKeeper's (which uses ``LocalBookieEnsemblePlacementPolicy``), each checked bookie gets its
own ledger with E = Qw = Qa = 1 placed on it alone, written, closed, read back, compared, deleted.
Without ``-b`` every writable bookie on this machine is checked. Exit 0 only if all passed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Collection, Sequence
from typing import Any

from bkclient import BKError, BookKeeper, ClientConfig, NotEnoughBookiesError
from bkclient.placement import BookieRacks
from pybk.arg_types import positive
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, shell_client

PASSWORD = b"bookiesanity"


class OneBookiePlacement:
    """Every ledger on one chosen bookie; never a replacement (a failure must show, not heal)."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id

    def new_ensemble(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int,
        bookies: BookieRacks, exclude: Collection[str] = (),
    ) -> list[str]:
        if ensemble_size != 1:
            raise NotEnoughBookiesError(f"bookiesanity places ledgers on one bookie, not {ensemble_size}")
        if self.bookie_id not in bookies or self.bookie_id in exclude:
            raise NotEnoughBookiesError(f"{self.bookie_id} is not a writable bookie")
        return [self.bookie_id]

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, write_quorum: int,
        bookies: BookieRacks, exclude: Collection[str] = (),
    ) -> str:
        raise NotEnoughBookiesError(f"bookiesanity tests {self.bookie_id} alone: no replacement")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bookiesanity", help="write/read a few entries on a bookie (E=Qw=Qa=1)"
    )
    parser.add_argument("-b", "--bookie", default=None, metavar="BOOKIE_ID",
                        help="bookie to check (default: every writable bookie on this machine)")
    parser.add_argument("-e", "--entries", type=positive, default=10, help="entries to write (default 10)")
    parser.add_argument("-t", "--timeout", type=positive, default=30,
                        help="seconds allowed per bookie (default 30)")
    parser.set_defaults(run=run)


def _local_addresses() -> set[str]:
    names = {"localhost", "::1", socket.gethostname(), socket.getfqdn()}
    addresses = set(names)
    for name in names:
        try:
            addresses.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
        except OSError:
            continue
    return addresses


def _is_local(host: str, local: set[str]) -> bool:
    return host.startswith("127.") or host in local


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata()
    writable = meta.bookie_watcher.writable_bookies()
    if args.bookie is not None:
        if args.bookie not in writable:
            ctx.error(f"bookiesanity: {args.bookie} is not a registered writable bookie "
                      f"(writable: {', '.join(sorted(writable)) or 'none'})")
            return EXIT_FAILED
        targets = [args.bookie]
    else:
        local = await asyncio.to_thread(_local_addresses)
        targets = sorted(b for b, info in writable.items() if _is_local(info.grpc_host, local))
        if not targets:
            ctx.error("bookiesanity: no writable bookie runs on this machine; name one with -b")
            return EXIT_FAILED
    results: list[dict[str, Any]] = []
    async with await shell_client(ctx, ClientConfig()) as bk:
        for bookie_id in targets:
            bk.ctx.placement = OneBookiePlacement(bookie_id)
            started = time.monotonic()
            try:
                async with asyncio.timeout(args.timeout):
                    await _check(bk, args.entries)
                results.append({"bookie_id": bookie_id, "ok": True})
            except (BKError, TimeoutError, SanityMismatchError) as exc:
                results.append({"bookie_id": bookie_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            results[-1]["elapsed_s"] = round(time.monotonic() - started, 3)
    ok = all(r["ok"] for r in results)
    lines = [
        f"{r['bookie_id']}: " + ("OK" if r["ok"] else f"FAILED ({r['error']})")
        + f", {args.entries} entries in {r['elapsed_s']} s"
        for r in results
    ]
    lines.append("Bookie sanity test succeeded" if ok else "Bookie sanity test FAILED")
    ctx.emit({"ok": ok, "entries": args.entries, "bookies": results}, "\n".join(lines))
    return 0 if ok else EXIT_FAILED


async def _check(bk: BookKeeper, entries: int) -> None:
    payloads = [f"bookiesanity {i} ".encode() + os.urandom(16) for i in range(entries)]
    writer = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
    try:
        for payload in payloads:
            await writer.append(payload)
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        read_back = [entry.data async for entry in reader.read(0, reader.last_add_confirmed)]
        if read_back != payloads:
            raise SanityMismatchError(
                f"ledger {writer.ledger_id}: read back {len(read_back)} entries that differ "
                f"from the {len(payloads)} written"
            )
    except BaseException:
        # Clean up, but report the original failure, not a cleanup one.
        with contextlib.suppress(BKError):
            await bk.delete_ledger(writer.ledger_id)
        raise
    await bk.delete_ledger(writer.ledger_id)


class SanityMismatchError(RuntimeError):
    """The bookie returned entries (with valid digests) other than those written."""
