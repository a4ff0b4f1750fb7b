"""Write path against a real ZooKeeper and real bookie processes: replication, ensemble change
after kill -9, passwords, an ensemble change racing a recovery opener, and the blocking facade."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster

from bkclient import (
    BadRequestError,
    BKError,
    BookKeeper,
    DigestType,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerState,
    UnauthorizedAccessError,
    WriteHandle,
)
from bkclient import sync as bksync
from bkclient.bookie_client import BookieClient
from bkclient.config import ClientConfig
from bkclient.digest import DigestManager, master_key

__all__ = ["client_cluster"]  # the shared cluster fixture, re-exported for pytest

pytestmark = pytest.mark.integration

PASSWORD = b"write-path"


def payload(entry_id: int) -> bytes:
    """Unique per entry, random inside: a misplaced or stale entry cannot compare equal."""
    return entry_id.to_bytes(8, "big") + os.urandom(120)


async def read_all(bk: BookKeeper, ledger_id: int, last: int) -> list[bytes]:
    rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
    return [entry.data async for entry in rh.read(0, last)] if last >= 0 else []


class PipelinedWriter:
    """Appends ``count`` entries with many in flight, recording what got acknowledged."""

    def __init__(self, handle: WriteHandle, count: int) -> None:
        self.handle = handle
        self.count = count
        self.sent: dict[int, bytes] = {}
        self.acked: dict[int, bytes] = {}
        self.errors: list[BaseException] = []
        self.progress = asyncio.Event()

    async def run(self, pause_every: int = 50) -> None:
        futures = []
        for i in range(self.count):
            try:
                await self.handle.wait_writable()
                data = payload(i)
                future = self.handle.append_async(data)
            except BKError as exc:
                self.errors.append(exc)
                break
            self.sent[i] = data
            future.add_done_callback(self._done)
            futures.append(future)
            if i % pause_every == 0:
                await asyncio.sleep(0.002)  # a steady stream, not one burst
        await asyncio.gather(*futures, return_exceptions=True)

    def _done(self, future: asyncio.Future[int]) -> None:
        error = future.exception()
        if error is not None:
            self.errors.append(error)
            return
        entry_id = future.result()
        self.acked[entry_id] = self.sent[entry_id]
        self.progress.set()

    async def wait_acked(self, n: int) -> None:
        while len(self.acked) < n and not self.errors:
            self.progress.clear()
            await asyncio.wait_for(self.progress.wait(), 30)


async def test_entries_are_replicated_and_read_back(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD, {"app": b"test"})
    data = [payload(i) for i in range(300)]
    ids = await asyncio.gather(*(wh.append_async(d) for d in data))
    assert list(ids) == list(range(300))
    assert wh.last_add_confirmed == 299
    await wh.close()
    md = await bk.ledger_metadata(wh.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 299, sum(map(len, data)))
    other = await client_cluster.client()
    assert await read_all(other, wh.ledger_id, 299) == data
    # Every entry is on exactly Qw = 2 bookies, those of its write set.
    ensemble = md.last_ensemble
    for entry_id in (0, 1, 2, 150):
        holders = []
        for index, bookie_id in enumerate(ensemble):
            client = BookieClient(bookie_id, client_cluster.by_id(bookie_id).address)
            try:
                await client.read_entry(wh.ledger_id, entry_id, timeout=10)
                holders.append(index)
            except BKError:
                pass
            finally:
                await client.close()
        assert sorted(holders) == sorted({entry_id % 3, (entry_id + 1) % 3})


async def test_writer_survives_kill9_of_an_ensemble_bookie(client_cluster: ClientCluster) -> None:
    await client_cluster.add_bookie()  # 4 bookies: one spare for the replacement
    bk = await client_cluster.client(add_entry_timeout_s=3.0)
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    victim = wh.ensemble[1]
    writer = PipelinedWriter(wh, 3000)
    task = asyncio.ensure_future(writer.run())
    await writer.wait_acked(500)
    await asyncio.to_thread(client_cluster.by_id(victim).kill9)
    await asyncio.wait_for(task, 120)

    assert writer.errors == []
    assert len(writer.acked) == 3000
    md = await bk.ledger_metadata(wh.ledger_id)
    assert len(md.segments) >= 2
    assert victim in md.segments[0].bookies
    assert victim not in md.last_ensemble
    assert 0 < md.segments[1].first_entry_id <= 3000
    await wh.close()

    reader = await client_cluster.client()
    assert await read_all(reader, wh.ledger_id, 2999) == [writer.acked[i] for i in range(3000)]


async def test_wrong_password_is_unauthorized(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client()
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32, PASSWORD)
    await wh.append(b"secret")
    other = await client_cluster.client()
    for recovery in (False, True):
        with pytest.raises(UnauthorizedAccessError):
            await other.open_ledger(wh.ledger_id, b"not the password", recovery=recovery)
    # The bookies enforce the ledger's master key themselves.
    bookie_id = wh.ensemble[0]
    client = BookieClient(bookie_id, client_cluster.by_id(bookie_id).address)
    try:
        with pytest.raises(UnauthorizedAccessError):
            forger = DigestManager(wh.ledger_id, b"not the password", DigestType.CRC32)
            body = forger.encode_entry(1, 0, 9, b"x")
            await client.add(wh.ledger_id, 1, forger.master_key, body)
        with pytest.raises(UnauthorizedAccessError):
            await client.read_entry(wh.ledger_id, -1, fence_master_key=master_key(b"wrong"), timeout=10)
    finally:
        await client.close()
    # The writer was not disturbed.
    assert await wh.append(b"still writing") == 1
    await wh.close()


async def test_the_metadata_timeout_is_the_zookeeper_session_timeout(client_cluster: ClientCluster) -> None:
    bk = await client_cluster.client(metadata_timeout_s=6.0)
    assert bk.ctx.metadata.zk.config.session_timeout_s == 6.0
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)  # the session works
    assert wh.ledger_id in await bk.list_ledgers()
    await wh.close()


async def test_an_oversized_entry_gets_a_clear_error_and_never_costs_an_ensemble_change(
    client_cluster: ClientCluster,
) -> None:
    bk = await client_cluster.client()
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    with pytest.raises(IncorrectParameterError, match=r"6000000 bytes is over the \d+-byte limit"):
        await wh.append(b"x" * 6_000_000)  # over the bookies' 5 MiB nettyMaxFrameSizeBytes
    assert await wh.append(b"fine") == 0
    await wh.close()
    # A client told the bookies take more than they do: the bookie's EBADREQ ends the handle with
    # that error, rather than replacing bookies that would all refuse the same entry.
    careless = await client_cluster.client(max_entry_size_bytes=8 * 1024 * 1024)
    wh = await careless.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    with pytest.raises(BadRequestError, match="limit"):
        await wh.append(b"x" * 6_000_000)
    md = await bk.ledger_metadata(wh.ledger_id)
    assert len(md.segments) == 1  # no ensemble change


@pytest.mark.parametrize("recovery_delay_s", [0.0, 0.05])
async def test_ensemble_change_racing_a_recovery_opener(
    client_cluster: ClientCluster, recovery_delay_s: float
) -> None:
    await client_cluster.add_bookie()
    writer_client = await client_cluster.client(add_entry_timeout_s=3.0)
    recovering_client = await client_cluster.client()
    wh = await writer_client.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    writer = PipelinedWriter(wh, 100_000)
    task = asyncio.ensure_future(writer.run(pause_every=20))
    await writer.wait_acked(300)

    victim = wh.ensemble[2]
    kill = asyncio.ensure_future(asyncio.to_thread(client_cluster.by_id(victim).kill9))
    await asyncio.sleep(recovery_delay_s)
    rh = await recovering_client.open_ledger(wh.ledger_id, PASSWORD, recovery=True)
    await kill
    await asyncio.wait_for(task, 120)

    # The writer was stopped: by fencing (bookies or IN_RECOVERY metadata) or by the close.
    assert writer.errors, "the writer should have been fenced"
    assert all(isinstance(e, LedgerFencedError | LedgerClosedError) for e in writer.errors), writer.errors
    md = rh.metadata
    assert md.state == LedgerState.CLOSED
    last = md.last_entry_id
    # Nothing acknowledged is lost; anything beyond was really sent by the writer.
    assert max(writer.acked) <= last
    data = [e.data async for e in rh.read(0, last)]
    assert len(data) == last + 1
    for entry_id, stored in enumerate(data):
        assert stored == writer.sent[entry_id]
    assert md.length == sum(len(d) for d in data)
    with pytest.raises((LedgerFencedError, LedgerClosedError)):
        await wh.append(b"too late")


async def test_blocking_facade(client_cluster: ClientCluster) -> None:
    await client_cluster.client()  # waits until the bookies are registered

    def scenario() -> dict[str, object]:
        seen: dict[str, object] = {}
        with bksync.BookKeeper(client_cluster.zk_hosts, ClientConfig(max_outstanding_adds=8)) as bk:
            wh = bk.create_ledger(3, 2, 2, password=PASSWORD)
            seen["first"] = wh.append(b"first")
            futures = [wh.append_async(b"entry %d" % i) for i in range(1, 50)]
            seen["ids"] = [f.result(timeout=30) for f in futures]
            called: list[tuple[int, object]] = []
            done = threading.Event()

            def callback(entry_id: int, error: object) -> None:
                called.append((entry_id, error))
                if len(called) == 30:
                    done.set()

            # 30 callbacks with a throttle of 8: the caller blocks for room, never fails
            seen["returned"] = [wh.append_with_callback(b"cb %d" % i, callback) for i in range(30)]
            assert done.wait(30)
            seen["called"] = called
            wh.wait_writable()
            wh.write_explicit_lac()
            wh.close()
            with bk.open_ledger(wh.ledger_id, password=PASSWORD) as rh:
                seen["data"] = [e.data for e in rh.read(0, rh.last_add_confirmed)]
                seen["one"] = rh.read_entry(57).data
                seen["state"] = rh.refresh_metadata().value.state
                reader = rh.read(0, rh.last_add_confirmed)  # stopped early: no leak, no hang
                seen["head"] = [next(reader).entry_id, next(reader).entry_id]
                reader.close()
        return seen

    seen = await asyncio.to_thread(scenario)
    assert seen["first"] == 0
    assert seen["ids"] == list(range(1, 50))
    assert seen["returned"] == list(range(50, 80))
    assert seen["called"] == [(i, None) for i in range(50, 80)]  # entry-id order, no error
    assert seen["data"] == (
        [b"first"] + [b"entry %d" % i for i in range(1, 50)] + [b"cb %d" % i for i in range(30)]
    )
    assert seen["one"] == b"cb 7"
    assert seen["state"] == LedgerState.CLOSED
    assert seen["head"] == [0, 1]


async def test_a_hung_bookie_is_replaced_after_the_add_timeout(client_cluster: ClientCluster) -> None:
    await client_cluster.add_bookie()
    bk = await client_cluster.client(add_entry_timeout_s=1.0)
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    writer = PipelinedWriter(wh, 1500)
    task = asyncio.ensure_future(writer.run())
    await writer.wait_acked(300)
    hung = client_cluster.by_id(wh.ensemble[0])
    os.kill(hung.pid, signal.SIGSTOP)  # alive and connected, but never answers
    try:
        await asyncio.wait_for(task, 120)
    finally:
        os.kill(hung.pid, signal.SIGCONT)
    assert writer.errors == []
    assert len(writer.acked) == 1500
    md = await bk.ledger_metadata(wh.ledger_id)
    assert hung.bookie_id not in md.last_ensemble
    await wh.close()
    reader = await client_cluster.client()
    assert await read_all(reader, wh.ledger_id, 1499) == [writer.acked[i] for i in range(1500)]


async def test_explicit_lac_makes_the_last_entry_visible_while_the_writer_idles(
    client_cluster: ClientCluster,
) -> None:
    bk = await client_cluster.client(explicit_lac_interval_s=0.1)
    wh = await bk.create_ledger(3, 3, 2, DigestType.CRC32C, PASSWORD)
    written = [payload(i) for i in range(10)]
    for data in written:
        await wh.append(data)
    reader = await client_cluster.client()
    rh = await reader.open_ledger(wh.ledger_id, PASSWORD, recovery=False)
    # Piggybacking alone would leave entry 9 unconfirmed until the next append; the explicit
    # LAC (written every 0.1 s while idle) confirms it.
    for _ in range(300):  # up to ~30 s: the bookies are asked again each time
        if await rh.read_last_add_confirmed() >= 9:
            break
        await asyncio.sleep(0.1)
    assert rh.last_add_confirmed == 9
    assert [e.data async for e in rh.read(0, 9)] == written
    await wh.close()
