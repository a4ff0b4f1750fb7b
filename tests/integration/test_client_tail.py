"""A tailing reader against real bookies: it receives every entry in order while the writer runs,
follows the writer across an ensemble change, and stops when the ledger is closed."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.client_cluster import (
    PASSWORD,
    ClientCluster,
    client_cluster,
    payload,
)

from bkclient import DigestType, LedgerEntry, ReadHandle

pytestmark = pytest.mark.integration
__all__ = ["client_cluster"]


async def collect(
    rh: ReadHandle, start: int, into: list[LedgerEntry], progress: asyncio.Event | None = None
) -> None:
    async for entry in rh.tail(start):
        into.append(entry)
        if progress is not None:
            progress.set()


async def wait_until(received: list[LedgerEntry], count: int, progress: asyncio.Event) -> None:
    async with asyncio.timeout(30):
        while len(received) < count:
            progress.clear()
            await progress.wait()


async def test_tailing_reader_gets_every_entry_in_order_and_stops_at_close(
    client_cluster: ClientCluster,
) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    reader = await client_cluster.client(long_poll_timeout_s=30.0)
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    received: list[LedgerEntry] = []
    progress = asyncio.Event()
    tail = asyncio.ensure_future(collect(rh, 0, received, progress))
    total = 0
    for burst in (1, 1, 5, 50, 1, 200, 3):  # single entries, small and large bursts, pauses
        await asyncio.gather(*(wh.append_async(payload(total + i)) for i in range(burst)))
        total += burst
        await asyncio.sleep(0.05)
    # An entry carries the writer's LAC when it was sent, so entries of one burst do not confirm
    # each other. One more entry after the last burst confirms them all; it alone stays invisible
    # to readers until the close (no explicit LAC here).
    await wh.append(payload(total))
    total += 1
    await wait_until(received, total - 1, progress)
    await asyncio.sleep(0.2)
    assert not tail.done() and len(received) == total - 1
    await wh.close()  # the close reaches the reader through its metadata watch, not a 30 s poll
    await asyncio.wait_for(tail, 15)
    assert [e.entry_id for e in received] == list(range(total))
    assert all(e.data == payload(e.entry_id) for e in received)


async def test_tail_from_the_middle_of_a_growing_ledger(client_cluster: ClientCluster) -> None:
    writer = await client_cluster.client()
    wh = await writer.create_ledger(3, 3, 2, DigestType.CRC32, PASSWORD)
    await asyncio.gather(*(wh.append_async(payload(i)) for i in range(100)))
    reader = await client_cluster.client()
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    received: list[LedgerEntry] = []
    tail = asyncio.ensure_future(collect(rh, 40, received))
    await asyncio.gather(*(wh.append_async(payload(i)) for i in range(100, 150)))
    await wh.close()
    await asyncio.wait_for(tail, 15)
    assert [e.entry_id for e in received] == list(range(40, 150))
    assert all(e.data == payload(e.entry_id) for e in received)


async def test_tail_follows_an_ensemble_change_after_a_bookie_dies(client_cluster: ClientCluster) -> None:
    await client_cluster.add_bookie()  # a spare to replace the dead one
    writer = await client_cluster.client(add_entry_timeout_s=5.0)
    wh = await writer.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    reader = await client_cluster.client(long_poll_timeout_s=2.0, speculative_read_timeout_s=0.2)
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    received: list[LedgerEntry] = []
    tail = asyncio.ensure_future(collect(rh, 0, received))
    await asyncio.gather(*(wh.append_async(payload(i)) for i in range(100)))
    victim = client_cluster.by_id(wh.metadata.last_ensemble[0])
    await asyncio.to_thread(victim.kill9)
    await asyncio.gather(*(wh.append_async(payload(i)) for i in range(100, 300)))
    assert len(wh.metadata.segments) >= 2  # the writer replaced the dead bookie
    await wh.close()
    await asyncio.wait_for(tail, 60)
    assert [e.entry_id for e in received] == list(range(300))
    assert all(e.data == payload(e.entry_id) for e in received)
