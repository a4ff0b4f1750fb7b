"""Reading ledgers from real bookie processes: byte-identical read-back (striped and batched),
a corrupt replica detected by its digest and skipped, a frozen bookie ridden over by speculative
reads, LAC reads and the long poll."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest
from tests.support.client_cluster import (
    PASSWORD,
    ClientCluster,
    client_cluster,
    payload,
)

from bkclient import BookKeeper, DigestMismatchError, DigestType, WriteHandle
from bkclient.ops.read import write_set_bookies

pytestmark = pytest.mark.integration
__all__ = ["client_cluster"]


async def write_entries(wh: WriteHandle, first: int, count: int) -> None:
    ids = await asyncio.gather(*(wh.append_async(payload(i)) for i in range(first, first + count)))
    assert ids == list(range(first, first + count))


@pytest.mark.parametrize(("ensemble", "write_quorum"), [(3, 2), (3, 3)])
async def test_closed_ledger_reads_back_byte_identical(
    client_cluster: ClientCluster, ensemble: int, write_quorum: int
) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(ensemble, write_quorum, 2, DigestType.CRC32C, PASSWORD)
    await write_entries(wh, 0, 600)
    await wh.close()
    reader = await client_cluster.client()
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    assert rh.is_closed and rh.last_add_confirmed == 599
    assert rh.length == sum(len(payload(i)) for i in range(600))
    entries = [e async for e in rh.read(0, 599)]
    assert [e.entry_id for e in entries] == list(range(600))
    assert all(e.data == payload(e.entry_id) and e.ledger_id == wh.ledger_id for e in entries)
    assert [e.entry_id async for e in rh.read(590, 599)] == list(range(590, 600))


async def test_corrupted_entry_on_one_bookie_is_detected_and_read_from_another(
    client_cluster: ClientCluster, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 2, 2, DigestType.CRC32, PASSWORD)
    await write_entries(wh, 0, 20)
    await wh.close()
    md = wh.metadata
    victim, healthy = write_set_bookies(md, 7)  # the victim is the replica asked first
    # Overwrite entry 7 on the victim with a copy whose payload has one flipped byte: what a
    # bookie serving a damaged disk block would hand out.
    good = wh.digest.encode_entry(7, 6, sum(len(payload(i)) for i in range(8)), payload(7))
    corrupt = good[:-10] + bytes([good[-10] ^ 0x01]) + good[-9:]
    await writer.ctx.bookie(victim).add(wh.ledger_id, 7, wh.digest.master_key, corrupt)
    served = await writer.ctx.bookie(victim).read_entry(wh.ledger_id, 7)
    with pytest.raises(DigestMismatchError):
        wh.digest.verify_entry(7, served.body)

    reader = await client_cluster.client()
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    with caplog.at_level(logging.WARNING, logger="bkclient.ops.read"):
        entries = [e async for e in rh.read(0, 19)]
        single = await rh.read_entry(7)
    assert [e.data for e in entries] == [payload(i) for i in range(20)]
    assert single.data == payload(7)
    assert any("corrupt" in r.getMessage() and victim in r.getMessage() for r in caplog.records)

    # Corrupt on every replica: the reader must say so, never hand out bad data.
    await writer.ctx.bookie(healthy).add(wh.ledger_id, 7, wh.digest.master_key, corrupt)
    with pytest.raises(DigestMismatchError):
        await rh.read_entry(7)


async def test_speculative_reads_ride_over_a_frozen_bookie(client_cluster: ClientCluster) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    await write_entries(wh, 0, 60)
    await wh.close()
    reader = await client_cluster.client(speculative_read_timeout_s=0.05, read_entry_timeout_s=30.0)
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    frozen = client_cluster.by_id(wh.metadata.last_ensemble[0])
    os.kill(frozen.pid, signal.SIGSTOP)  # alive but silent: only speculation helps
    try:
        entries = [e async for e in rh.read(0, 59)]
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert [e.data for e in entries] == [payload(i) for i in range(60)]


async def test_lac_reads_and_long_poll_on_an_open_ledger(client_cluster: ClientCluster) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 2, 2, DigestType.HMAC, PASSWORD)
    for i in range(10):
        await wh.append(payload(i))
    reader: BookKeeper = await client_cluster.client()
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    assert rh.last_add_confirmed == -1 and not rh.is_closed
    # Entry 9 carries LAC 8 (the writer's LAC when it sent entry 9).
    assert await rh.read_last_add_confirmed() == 8
    assert await rh.try_read_last_add_confirmed() == 8
    assert [e.entry_id async for e in rh.read(0, 8)] == list(range(9))

    poll = asyncio.ensure_future(rh.read_lac_long_poll(8, 20.0))
    await asyncio.sleep(0.2)
    assert not poll.done()  # parked on the bookies: nothing new yet
    await wh.append(payload(10))  # carries LAC 9
    result = await asyncio.wait_for(poll, 20)
    assert result.last_add_confirmed == 9
    if result.entry is not None:
        assert result.entry.entry_id == 9 and result.entry.data == payload(9)
    assert rh.last_add_confirmed == 9
    timed_out = await rh.read_lac_long_poll(9, 0.2)
    assert timed_out.last_add_confirmed == 9 and timed_out.entry is None
    await wh.close()
