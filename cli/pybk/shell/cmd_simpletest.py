"""``simpletest [-e 3] [-w 2] [-a 2] [-n 1000] [-s 100]``: create a ledger, write N entries through
the replicating client, close it, read every entry back and compare. The ledger is kept (inspect it
with ``ledgermetadata`` / ``readledger``, remove it with ``deleteledger``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from bkclient import DigestType
from pybk.arg_types import positive
from pybk.progress import Progress
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, shell_client, usage_error

PASSWORD = b""  # like BookKeeper's simpletest: anyone may read the test ledger back


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "simpletest", help="write N entries to a new ledger and read them back"
    )
    parser.add_argument("-e", "--ensemble", type=positive, default=3, help="ensemble size (default 3)")
    parser.add_argument("-w", "--writeQuorum", dest="write_quorum", type=positive, default=2,
                        help="write quorum size (default 2)")
    parser.add_argument("-a", "--ackQuorum", dest="ack_quorum", type=positive, default=2,
                        help="ack quorum size (default 2)")
    parser.add_argument("-n", "--numEntries", dest="entries", type=positive, default=1000,
                        help="entries to write (default 1000)")
    parser.add_argument("-s", "--size", type=positive, default=100, help="bytes per entry (default 100)")
    parser.set_defaults(run=run)


def _payload(index: int, size: int) -> bytes:
    head = f"simpletest entry {index} ".encode()
    return (head + os.urandom(max(0, size - len(head))))[:size]


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    if not args.ensemble >= args.write_quorum >= args.ack_quorum:
        return usage_error(
            ctx, f"simpletest: need ensemble >= write quorum >= ack quorum, got "
            f"-e {args.ensemble} -w {args.write_quorum} -a {args.ack_quorum}",
        )
    payloads = [_payload(i, args.size) for i in range(args.entries)]
    async with await shell_client(ctx) as bk:
        started = time.monotonic()
        writer = await bk.create_ledger(
            ensemble=args.ensemble, write_quorum=args.write_quorum, ack_quorum=args.ack_quorum,
            digest=DigestType.CRC32C, password=PASSWORD, custom_metadata={"application": b"pybk-simpletest"},
        )
        futures: list[asyncio.Future[int]] = []
        with Progress(len(payloads), description="writing", quiet=ctx.as_json, stream=ctx.err) as progress:
            try:
                for index, payload in enumerate(payloads, 1):
                    await writer.wait_writable()  # the client's outstanding-add limit paces us
                    futures.append(writer.append_async(payload))
                    if index % 256 == 0:  # sent; the client's limit keeps acks close behind
                        progress.update(index)
            finally:
                # every add's outcome is taken (a failed ledger fails them all, and the loop too)
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        await writer.close()
        write_s = time.monotonic() - started
        reader = await bk.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        mismatched = 0
        read = 0
        with Progress(len(payloads), description="reading", quiet=ctx.as_json, stream=ctx.err) as progress:
            async for entry in reader.read(0, reader.last_add_confirmed):
                mismatched += entry.data != payloads[entry.entry_id]
                read += 1
                if read % 256 == 0:
                    progress.update(read)
    ok = read == len(payloads) and mismatched == 0
    data = {
        "ledger_id": writer.ledger_id,
        "entries": len(payloads),
        "entries_read_back": read,
        "mismatched": mismatched,
        "verified": ok,
        "ensemble": args.ensemble,
        "write_quorum": args.write_quorum,
        "ack_quorum": args.ack_quorum,
        "entry_size": args.size,
        "write_s": round(write_s, 3),
        "throughput_eps": round(len(payloads) / write_s, 1) if write_s > 0 else 0.0,
    }
    text = (
        f"{len(payloads)} entries written to ledger {writer.ledger_id} "
        f"(E={args.ensemble} Qw={args.write_quorum} Qa={args.ack_quorum}, {args.size} bytes each) "
        f"in {write_s:.2f} s, {data['throughput_eps']:,.0f} entries/s; "
        + ("read back and verified" if ok else f"READ BACK {read}, {mismatched} DIFFERENT")
    )
    ctx.emit(data, text)
    return 0 if ok else EXIT_FAILED
