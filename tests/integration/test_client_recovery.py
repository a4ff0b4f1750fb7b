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
from tests.support.client_cluster import (
    PASSWORD,
    ClientCluster,
    client_cluster,
    payload,
)
from tests.support.paused_writer import go, kill_writer, start_writer, wait_acked
from tests.support.recovery_hooks import on_replacement_picked
from tests.support.replicas import holders, short_of_ack_quorum

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
    from tests.support.client_cluster import PASSWORD, payload

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


async def test_recovery_does_not_count_a_paused_bookie_it_replaced(client_cluster: ClientCluster) -> None:
    """Issue 25: a bookie of the ensemble is paused (SIGSTOP) while the writer appends, so the
    entries of its write sets reach one bookie; the writer dies. Recovery times out on the paused
    bookie and replaces it; the bookie resumes (SIGCONT) the moment the replacement is picked
    and acknowledges the re-adds still waiting for it. Those acks must not count: every
    entry must end up on Qa bookies of the write set the closed metadata names."""
    await client_cluster.add_bookie()  # a fourth bookie to replace the paused one with
    writer = await start_writer(client_cluster.zk_hosts, acked_first=40, appended_after=600)
    # Both clients first: a bookie paused past its ZooKeeper session is no longer registered.
    watcher = await client_cluster.client()
    recoverer = await client_cluster.client(add_entry_timeout_s=2.0)
    paused = client_cluster.by_id(writer.ensemble[0])
    os.kill(paused.pid, signal.SIGSTOP)
    resumed = False

    def resume(_: str) -> None:
        nonlocal resumed
        if not resumed:
            resumed = True
            os.kill(paused.pid, signal.SIGCONT)

    try:
        await go(writer)
        # The writer dies once every entry reached the bookie of its write set that is not paused.
        md = (await watcher.ctx.ledger_manager.read_ledger_metadata(writer.ledger_id)).value
        last = 40 + 600 - 1

        async def reached_live_bookies(entry_ids: range) -> bool:
            for entry_id in entry_ids:
                held = await holders(watcher, writer.ledger_id, md, entry_id, skip=paused.bookie_id)
                if len(held) < len([b for b in write_set_bookies(md, entry_id) if b != paused.bookie_id]):
                    return False
            return True

        for _ in range(600):
            if await reached_live_bookies(range(last - 2, last + 1)) and await reached_live_bookies(
                range(40, last + 1)
            ):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the writer's entries never reached the bookies that are not paused")
        last_acked = max(39, await kill_writer(writer))
        assert last_acked < last  # the paused bookie held the acknowledgements back

        on_replacement_picked(recoverer.ctx.placement, resume)
        rh = await recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
    finally:
        if not resumed:
            os.kill(paused.pid, signal.SIGCONT)
        await kill_writer(writer)
    closed = rh.metadata
    assert resumed and paused.bookie_id not in closed.last_ensemble  # the scenario happened
    assert rh.is_closed and closed.last_entry_id >= last_acked
    assert await short_of_ack_quorum(watcher, writer.ledger_id, closed) == []


async def test_a_recoverer_killed_after_replacing_a_bookie_leaves_every_acknowledged_entry(
    client_cluster: ClientCluster,
) -> None:
    """Follow-up of issue 25: a first recoverer replaces a paused bookie of the writer's ensemble
    and dies before it closes the ledger. A second recoverer must still find every acknowledged
    entry where the writer put it. Had the first one written its replacement (which holds nothing)
    into the metadata, the second would read from it, and with Qw = Qa = 2 one "no such entry"
    from it, for an entry whose other replica is paused here, would end the ledger early."""
    # The writer sends its last 600 entries without waiting: they all carry LAC 39, so both
    # recoverers must read and re-add 40..639.
    writer = await start_writer(client_cluster.zk_hosts, acked_first=40, appended_after=600)
    last = 639
    spare = await client_cluster.add_bookie()  # not in the writer's ensemble: the replacement
    # Every client first: a bookie paused past its ZooKeeper session is no longer registered.
    watcher = await client_cluster.client()
    first = await client_cluster.client(add_entry_timeout_s=2.0)
    second = await client_cluster.client(add_entry_timeout_s=2.0)
    written = (await watcher.ctx.ledger_manager.read_ledger_metadata(writer.ledger_id)).value
    try:
        await go(writer)
        await wait_acked(writer, last)
    finally:
        await kill_writer(writer)
    replaced, other = client_cluster.by_id(writer.ensemble[0]), client_cluster.by_id(writer.ensemble[1])

    # The first recoverer: its re-adds to the paused bookie time out, it picks the spare, and
    # dies right then.
    recovering = asyncio.ensure_future(first.open_ledger(writer.ledger_id, PASSWORD, recovery=True))
    picked: list[str] = []

    def die(chosen: str) -> None:
        picked.append(chosen)
        recovering.cancel()

    on_replacement_picked(first.ctx.placement, die)
    os.kill(replaced.pid, signal.SIGSTOP)
    try:
        with pytest.raises(asyncio.CancelledError):
            await recovering
    finally:
        os.kill(replaced.pid, signal.SIGCONT)
    assert [client_cluster.by_id(b) for b in picked] == [spare]
    left = (await watcher.ctx.ledger_manager.read_ledger_metadata(writer.ledger_id)).value
    assert left.state == LedgerState.IN_RECOVERY and left.segments == written.segments

    # The second recoverer, with the other bookie paused: for the entries on it and the replaced
    # one (every third), only the replaced one (back now) can say that they exist; the spare, had
    # it been named in its place, would say they do not.
    os.kill(other.pid, signal.SIGSTOP)
    try:
        rh = await second.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
    finally:
        os.kill(other.pid, signal.SIGCONT)
    assert rh.is_closed and rh.metadata.last_entry_id == last
    assert await short_of_ack_quorum(watcher, writer.ledger_id, rh.metadata) == []
    await assert_ledger_content(client_cluster, writer.ledger_id, last)
