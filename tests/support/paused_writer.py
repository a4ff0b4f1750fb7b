"""A ledger writer in its own process, driven over stdin/stdout, for tests that abandon it.

Run as ``python -m tests.support.paused_writer ZK_HOSTS ACKED_FIRST APPENDED_AFTER`` (from the repo
root, with the packages on PYTHONPATH; :func:`start_writer` does that). It creates a ledger E3 Qw2
Qa2, appends ``ACKED_FIRST`` entries one by one and prints ``ready LEDGER_ID B1,B2,B3`` (the
ensemble). It then waits for a line on stdin (the test pauses a bookie meanwhile), appends
``APPENDED_AFTER`` more entries without waiting and prints ``appended``, then ``acked ENTRY_ID`` for
every entry acknowledged to it, until it is killed. Its add timeout is long, so it never changes the
ensemble on its own: whatever a paused bookie did not get stays on the other replica only.

Entry ``i`` carries ``payload(i)``, with the password of ``tests.support.client_cluster``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bkclient import BookKeeper, ClientConfig, DigestType

REPO = Path(__file__).resolve().parents[2]
_ADD_TIMEOUT_S = 600.0  # the test kills the writer long before


async def _main(zk_hosts: str, acked_first: int, appended_after: int) -> None:
    from tests.support.client_cluster import PASSWORD, payload

    bk = await BookKeeper.connect(zk_hosts, ClientConfig(add_entry_timeout_s=_ADD_TIMEOUT_S))
    await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) >= 3, 30)
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
    for i in range(acked_first):
        await wh.append(payload(i))
    print("ready", wh.ledger_id, ",".join(wh.ensemble), flush=True)
    await asyncio.to_thread(sys.stdin.readline)

    def acked(future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            print("acked", future.result(), flush=True)

    for i in range(acked_first, acked_first + appended_after):
        wh.append_async(payload(i)).add_done_callback(acked)
    print("appended", flush=True)
    await asyncio.Event().wait()  # until killed


@dataclass
class WriterProcess:
    proc: asyncio.subprocess.Process
    ledger_id: int
    ensemble: list[str]


async def start_writer(zk_hosts: str, acked_first: int, appended_after: int) -> WriterProcess:
    """Start the writer and wait for its ``ready`` line (the caller kills ``proc`` in the end)."""
    paths = [str(REPO / p) for p in ("proto", "metadata", "server", "client", "cli")] + [str(REPO)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.paused_writer", zk_hosts, str(acked_first),
        str(appended_after), cwd=REPO, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line.startswith(b"ready "):
        proc.kill()
        stderr = (await proc.stderr.read()).decode()
        raise RuntimeError(f"writer process did not get ready: {line!r}\n{stderr[-3000:]}")
    _, ledger_id, ensemble = line.decode().split()
    return WriterProcess(proc, int(ledger_id), ensemble.split(","))


async def go(writer: WriterProcess) -> None:
    """Let the writer append its second batch; returns once it appended all of it."""
    proc = writer.proc
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    while (line := await asyncio.wait_for(proc.stdout.readline(), 60)) != b"appended\n":
        if not line:
            raise RuntimeError("writer process exited before appending")


async def wait_acked(writer: WriterProcess, entry_id: int) -> int:
    """Wait until the writer printed that ``entry_id`` is acknowledged; returns it. (Acks come in
    entry order; :func:`kill_writer` then reports only the acks printed after this one.)"""
    proc = writer.proc
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line:
            raise RuntimeError(f"writer process exited before entry {entry_id} was acknowledged")
        if line.startswith("acked ") and int(line.split()[1]) >= entry_id:
            return int(line.split()[1])


async def kill_writer(writer: WriterProcess) -> int:
    """SIGKILL (a crash: no shutdown code runs); returns the highest entry id it saw acknowledged."""
    proc = writer.proc
    assert proc.stdout is not None
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    last = -1
    for line in (await proc.stdout.read()).decode().splitlines(keepends=True):
        if line.startswith("acked ") and line.endswith("\n"):  # a kill can cut the last line short
            last = max(last, int(line.split()[1]))
    return last


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
