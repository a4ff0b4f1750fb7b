"""``pybk shell readledger -r`` on a ledger whose writer is still open: without ``-r`` the shell
reads what the bookies confirm and leaves the ledger open; with ``-r`` it recovers the ledger
(fences the writer, closes it at its last replicated entry) and reads everything."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from typing import Any

import pytest
from tests.support.bookies import BookieFactory

from bkclient import BookKeeper, LedgerClosedError, LedgerFencedError

pytestmark = pytest.mark.integration

PASSWORD = b"shell-recovery"


def shell_json(zk_hosts: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "pybk", "shell", "--zk", zk_hosts, "--json", *args],
        check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def payload(entry_id: int) -> bytes:
    return f"recover me {entry_id}".encode()


async def test_readledger_r_recovers_an_open_ledger_and_fences_its_writer(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    assert (await asyncio.to_thread(shell_json, zk_hosts, "initnewcluster"))["created"] is True
    for _ in range(2):
        await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) >= 2, 30.0)
        wh = await bk.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await wh.append(payload(i))
        lid = str(wh.ledger_id)

        plain = await asyncio.to_thread(shell_json, zk_hosts, "readledger", "-l", lid)
        assert plain["closed"] is False
        # The bookies know the LAC piggybacked on the entries (8, or 9 after an explicit LAC).
        assert plain["last_add_confirmed"] in (8, 9)
        assert [e["entry_id"] for e in plain["entries"]] == list(range(plain["last_add_confirmed"] + 1))
        assert (await asyncio.to_thread(shell_json, zk_hosts, "ledgermetadata", "-l", lid))["state"] == "OPEN"

        recovered = await asyncio.to_thread(shell_json, zk_hosts, "readledger", "-l", lid, "-r")
        assert recovered["closed"] is True and recovered["last_add_confirmed"] == 9
        assert [base64.b64decode(e["data_base64"]) for e in recovered["entries"]] == [
            payload(i) for i in range(10)
        ]
        meta = await asyncio.to_thread(shell_json, zk_hosts, "ledgermetadata", "-l", lid)
        assert (meta["state"], meta["last_entry_id"]) == ("CLOSED", 9)
        # The first writer was fenced: it can no longer add behind the reader's back.
        with pytest.raises((LedgerFencedError, LedgerClosedError)):
            await wh.append(b"too late")
