"""Recovery against real bookies: a second client fences a live writer and closes the ledger at
the right entry; a writer process killed with kill -9 leaves a ledger that recovery closes with
every acknowledged entry intact."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from tests.integration.test_client_read_cluster import (
    PASSWORD,
    ClientCluster,
    client_cluster,
    payload,
)

from bkclient import DigestType, LedgerFencedError, LedgerState
from bkclient.ops.read import write_set_bookies

pytestmark = pytest.mark.integration
__all__ = ["client_cluster"]


async def assert_ledger_content(cluster: ClientCluster, ledger_id: int, last_acked: int) -> int:
    """Open without recovery, check the ledger is closed at or after ``last_acked`` with every
    entry byte-identical, and that every entry it holds is stored on an ack quorum. Returns its
    last entry id."""
    reader = await cluster.client()
    rh = await reader.open_ledger(ledger_id, PASSWORD, recovery=False)
    md = rh.metadata
    assert md.state == LedgerState.CLOSED
    assert md.last_entry_id >= last_acked
    entries = [e async for e in rh.read(0, md.last_entry_id)] if md.last_entry_id >= 0 else []
    assert [e.entry_id for e in entries] == list(range(md.last_entry_id + 1))
    assert all(e.data == payload(e.entry_id) for e in entries)
    assert md.length == sum(len(e.data) for e in entries)
    # Entries past the last acknowledged one are only allowed if they now really are on Qa bookies.
    for entry_id in range(last_acked + 1, md.last_entry_id + 1):
        holders = 0
        for bookie_id in write_set_bookies(md, entry_id):
            result = await reader.ctx.bookie(bookie_id).read_entry(ledger_id, entry_id)
            rh.digest.verify_entry(entry_id, result.body)
            holders += 1
        assert holders >= md.ack_quorum_size
    return md.last_entry_id


async def test_recovery_opener_fences_the_writer_and_closes_at_the_acknowledged_end(
    client_cluster: ClientCluster,
) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    acked: list[int] = []
    for i in range(50):
        acked.append(await wh.append(payload(i)))
    # Keep adds in flight while the second client recovers.
    in_flight = [wh.append_async(payload(i)) for i in range(50, 400)]
    recoverer = await client_cluster.client()
    rh = await recoverer.open_ledger(wh.ledger_id, PASSWORD, recovery=True)
    outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
    acked += [o for o in outcomes if isinstance(o, int)]
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert acked == list(range(len(acked)))  # acknowledged strictly in order, no holes
    assert rh.is_closed
    assert rh.last_add_confirmed >= acked[-1]
    # The writer is fenced out: whatever it still tries fails with LedgerFencedError.
    with pytest.raises(LedgerFencedError):
        await wh.append(payload(len(acked)))
    assert all(isinstance(f, LedgerFencedError) for f in failures), failures[:3]
    last = await assert_ledger_content(client_cluster, wh.ledger_id, acked[-1])
    assert last == rh.last_add_confirmed


REPO = Path(__file__).resolve().parents[2]  # the writer process imports the packages from here
WRITER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from bkclient import BookKeeper, DigestType
    from tests.integration.test_client_read_cluster import PASSWORD, payload

    async def main(zk):
        bk = await BookKeeper.connect(zk)
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) >= 3, 30)
        wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32, PASSWORD)
        print("ledger", wh.ledger_id, flush=True)
        def acked(future):
            if future.exception() is None:
                print("acked", future.result(), flush=True)
        i = 0
        while True:
            futures = [wh.append_async(payload(i + j)) for j in range(20)]
            for future in futures:
                future.add_done_callback(acked)
            i += 20
            await asyncio.sleep(0.005)
            if i % 200 == 0:
                await asyncio.gather(*futures)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_recovery_after_the_writer_process_is_killed(client_cluster: ClientCluster) -> None:
    repo = REPO
    paths = [str(repo / p) for p in ("proto", "metadata", "server", "client", "cli")] + [str(repo)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER_SCRIPT,
        client_cluster.zk_hosts,
        cwd=repo,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    ledger_id = -1
    last_acked = -1

    def take(line: str) -> None:
        nonlocal ledger_id, last_acked
        kind, value = line.split()
        if kind == "ledger":
            ledger_id = int(value)
        else:
            last_acked = max(last_acked, int(value))

    try:
        while last_acked < 500:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line:
                stderr = (await proc.stderr.read()).decode()
                pytest.fail(f"writer process exited early:\n{stderr[-3000:]}")
            take(line.decode())
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the writer we started: a crash, no shutdown code runs
        await proc.wait()
    # Acks printed before the kill but still in the pipe count too: they were acknowledged.
    # The kill can cut the last line short ("acked 12" of "acked 123"); only whole lines count.
    for rest in (await proc.stdout.read()).decode().splitlines(keepends=True):
        if rest.endswith("\n"):
            take(rest)

    recoverer = await client_cluster.client()
    rh = await recoverer.open_ledger(ledger_id, PASSWORD, recovery=True)
    assert rh.is_closed and rh.last_add_confirmed >= last_acked
    last = await assert_ledger_content(client_cluster, ledger_id, last_acked)
    assert last == rh.last_add_confirmed
    # A second recovery open changes nothing.
    again = await (await client_cluster.client()).open_ledger(ledger_id, PASSWORD, recovery=True)
    assert again.metadata == rh.metadata
