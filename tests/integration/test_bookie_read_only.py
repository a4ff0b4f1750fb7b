"""Read-only mode on real bookie processes with a real ZooKeeper and a real disk.

A bookie's disk "fills" when the test allocates a large file in its ledger directory: the
thresholds are set a little above the filesystem's current usage, so a few GiB cross them without
filling the machine's disk. The bookie then turns read-only: it moves to
``/ledgers/available/readonly``, refuses adds with EREADONLY but takes recovery adds and serves
reads, and a writer whose ensemble holds it carries on through an ensemble change without an
error. Once the file is gone the bookie is writable again.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from tests.support.bookies import BookieFactory, BookieProcess, entry_body

from bkclient import BookKeeper, DigestType, NotEnoughBookiesError
from bkmeta.metadata_client import MetadataClient
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

GiB = 1024**3
PASSWORD = b"ro"
STATE = "/api/v1/bookie/state"
READONLY = "/api/v1/bookie/state/readonly"


def _disk_conf(directory: Path, **extra: str) -> dict[str, str]:
    """Thresholds 1 GiB of free space above the filesystem's current usage; writable again below
    half a GiB above it. Checked every 100 ms."""
    st = os.statvfs(directory)
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    if free < 4 * GiB:
        pytest.fail(f"{directory}: this test needs 4 GiB free on its filesystem, has {free / GiB:.1f} GiB")
    used = 1.0 - free / total
    full, lwm = used + GiB / total, used + GiB / 2 / total
    return {
        "diskUsageThreshold": repr(full),
        "diskUsageWarnThreshold": repr(lwm),
        "diskUsageLwmThreshold": repr(lwm),
        "diskCheckInterval": "100",
        "minUsableSizeForHighPriorityWrites": str(GiB),
        **extra,
    }


def _fill(bookie: BookieProcess) -> Path:
    """Take 1.5 GiB of real disk blocks in the bookie's ledger directory."""
    path = bookie.ledger_dirs[0] / "filler"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, 3 * GiB // 2)
    finally:
        os.close(fd)
    return path


def _http(bookie: BookieProcess, method: str, path: str, body: bytes | None = None) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{bookie.http_port}{path}", data=body, method=method)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def _http_error(bookie: BookieProcess, path: str, body: bytes) -> tuple[int, Any]:
    with pytest.raises(urllib.error.HTTPError) as caught:
        _http(bookie, "PUT", path, body)
    return caught.value.code, json.loads(caught.value.read())


async def _wait_registered(bk: BookKeeper, bookie: BookieProcess, read_only: bool) -> None:
    def placed(watcher: Any) -> bool:
        where = watcher.readonly_bookies() if read_only else watcher.writable_bookies()
        other = watcher.writable_bookies() if read_only else watcher.readonly_bookies()
        return bookie.bookie_id in where and bookie.bookie_id not in other

    await bk.ctx.bookie_watcher.wait_for(placed, 10.0)


async def _wait_disk_reason(bookie: BookieProcess, present: bool) -> None:
    """Until the bookie's state lists (or no longer lists) a full disk among its reasons."""
    async with asyncio.timeout(10):
        while True:
            state = await asyncio.to_thread(_http, bookie, "GET", STATE)
            if any("diskUsageThreshold" in reason for reason in state["readOnlyReasons"]) == present:
                return
            await asyncio.sleep(0.1)


def _metric(bookie: BookieProcess, name: str) -> float:
    request = urllib.request.Request(f"http://127.0.0.1:{bookie.http_port}/metrics")
    with urllib.request.urlopen(request, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{bookie}: no metric {name}")


def _raw_add(bookie: BookieProcess, ledger_id: int, entry_id: int, recovery: bool) -> int:
    with grpc.insecure_channel(bookie.address) as channel:
        request = bookie_pb2.AddRequest(
            ledger_id=ledger_id, entry_id=entry_id, master_key=b"k" * 20,
            body=entry_body(ledger_id, entry_id, entry_id - 1),
            flags=bookie_pb2.RECOVERY_ADD if recovery else 0,
        )
        status: int = bookie_pb2_grpc.BookieStub(channel).AddEntry(request, timeout=10).status
        return status


async def test_a_full_disk_makes_the_bookie_read_only_and_writers_move_on(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    full = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=_disk_conf(tmp_path), ledger_dirs=1)
    others = [await asyncio.to_thread(bookie_factory, zk=zk_hosts) for _ in range(3)]
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 4, 30.0)
        assert _metric(full, "bookie_SERVER_STATUS") == 1.0
        # a writer whose ensemble holds the bookie that will fill
        for _ in range(50):
            writer = await bk.create_ledger(3, 3, 2, DigestType.CRC32C, PASSWORD)
            if full.bookie_id in writer.ensemble:
                break
            await writer.close()
        assert full.bookie_id in writer.ensemble
        data = [os.urandom(512) for _ in range(400)]
        for payload in data[:200]:
            await writer.append(payload)

        filler = await asyncio.to_thread(_fill, full)
        await _wait_registered(bk, full, read_only=True)
        state = await asyncio.to_thread(_http, full, "GET", STATE)
        assert state["readOnly"] is True and state["availableForHighPriorityWrites"] is True
        assert any("diskUsageThreshold" in reason and str(filler.parent) in reason
                   for reason in state["readOnlyReasons"]), state
        assert await asyncio.to_thread(_http, full, "GET", READONLY) == {"readOnly": True}
        assert _metric(full, "bookie_SERVER_STATUS") == 0.0

        # the writer carries on: the read-only bookie is replaced, the application sees no error
        for payload in data[200:]:
            await writer.append(payload)
        assert writer.ensemble_changes >= 1 and full.bookie_id not in writer.ensemble
        # new ledgers leave it out; there are not 4 writable bookies any more
        fresh = await bk.create_ledger(3, 3, 2, DigestType.CRC32C, PASSWORD)
        assert set(fresh.ensemble) == {b.bookie_id for b in others}
        await fresh.close()
        with pytest.raises(NotEnoughBookiesError):
            await bk.create_ledger(4, 3, 2, DigestType.CRC32C, PASSWORD)
        # the bookie itself: adds refused, recovery adds taken (there is room), reads served
        assert await asyncio.to_thread(_raw_add, full, 9999, 0, False) == bookie_pb2.EREADONLY
        assert await asyncio.to_thread(_raw_add, full, 9999, 0, True) == bookie_pb2.EOK
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        segments = reader.metadata.segments
        assert full.bookie_id in segments[0].bookies and full.bookie_id not in segments[-1].bookies
        assert [e.data async for e in reader.read(0, 399)] == data

        # space back: writable again, and registered so
        await asyncio.to_thread(filler.unlink)
        await _wait_registered(bk, full, read_only=False)
        assert _metric(full, "bookie_SERVER_STATUS") == 1.0
        wide = await bk.create_ledger(4, 3, 2, DigestType.CRC32C, PASSWORD)
        await wide.append(b"all four")
        await wide.close()

        # an operator's read-only outlasts the disk's: only the operator undoes it
        reply = await asyncio.to_thread(_http, full, "PUT", READONLY, b'{"readOnly": true}')
        assert reply == {"readOnly": True}
        await _wait_registered(bk, full, read_only=True)
        filler = await asyncio.to_thread(_fill, full)
        await _wait_disk_reason(full, present=True)
        await asyncio.to_thread(filler.unlink)
        await _wait_disk_reason(full, present=False)
        assert (await asyncio.to_thread(_http, full, "GET", STATE))["readOnly"] is True
        code, reply = await asyncio.to_thread(_http_error, full, READONLY, b'{"readOnly": "yes"}')
        assert code == 400 and "readOnly must be true or false" in reply["error"]
        reply = await asyncio.to_thread(_http, full, "PUT", READONLY, b'{"readOnly": false}')
        assert reply == {"readOnly": False}
        await _wait_registered(bk, full, read_only=False)


async def test_forced_read_only_and_shutdown_when_read_only_mode_is_off(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    forced = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf={"forceReadOnlyBookie": "true"})
    strict = await asyncio.to_thread(
        bookie_factory, zk=zk_hosts, conf=_disk_conf(tmp_path, readOnlyModeEnabled="false"), ledger_dirs=1
    )
    async with await BookKeeper.connect(zk_hosts) as bk:
        await _wait_registered(bk, forced, read_only=True)  # registered there from the start
        await _wait_registered(bk, strict, read_only=False)
        code, reply = await asyncio.to_thread(_http_error, forced, READONLY, b'{"readOnly": false}')
        assert code == 400 and "forceReadOnlyBookie" in reply["error"]
        code, reply = await asyncio.to_thread(_http_error, strict, READONLY, b'{"readOnly": true}')
        assert code == 400 and "readOnlyModeEnabled is false" in reply["error"]

        filler = await asyncio.to_thread(_fill, strict)
        try:
            exit_code = await asyncio.to_thread(strict.wait_exit, 20.0)
        finally:
            await asyncio.to_thread(filler.unlink)
        assert exit_code == 1
        assert "readOnlyModeEnabled is false" in strict.run_log_text()
        await bk.ctx.bookie_watcher.wait_for(lambda w: strict.bookie_id not in w.all_bookies(), 10.0)


async def test_an_operators_read_only_survives_a_crash_when_persisted(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    kept = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf={"persistBookieStatusEnabled": "true"})
    plain = await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    async with await BookKeeper.connect(zk_hosts) as bk:
        for bookie in (kept, plain):
            reply = await asyncio.to_thread(_http, bookie, "PUT", READONLY, b'{"readOnly": true}')
            assert reply == {"readOnly": True}
            await _wait_registered(bk, bookie, read_only=True)
        await asyncio.to_thread(kept.kill9)
        await asyncio.to_thread(kept.start)
        # registered read-only from its start (the old session's znode only lingers, and the
        # writable one would fail this wait), and read-only inside
        await _wait_registered(bk, kept, read_only=True)
        state = await asyncio.to_thread(_http, kept, "GET", STATE)
        assert state["readOnlyReasons"] == [
            "set read-only through the admin API: by an operator, before the last restart"
        ]
        assert await asyncio.to_thread(_raw_add, kept, 7, 0, False) == bookie_pb2.EREADONLY
        await asyncio.to_thread(plain.restart)
        await _wait_registered(bk, plain, read_only=False)  # without the key, a restart forgets

        reply = await asyncio.to_thread(_http, kept, "PUT", READONLY, b'{"readOnly": false}')
        assert reply == {"readOnly": False}
        await asyncio.to_thread(kept.restart)
        await _wait_registered(bk, kept, read_only=False)
        assert await asyncio.to_thread(_raw_add, kept, 7, 0, False) == bookie_pb2.EOK
