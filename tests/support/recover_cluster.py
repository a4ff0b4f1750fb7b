"""A cluster with a bookie to lose, for the recovery and autorecovery integration tests: its set-up,
a ledger whose ensemble holds a given bookie, the check that every replica holds its entries, and
the shell run as a user would."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc

from bkclient import BookKeeper, DigestType, WriteHandle
from bkclient.distribution import RoundRobinDistribution
from bkmeta.metadata_client import MetadataClient
from bkmeta.model import LedgerMetadata
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from tests.support.bookies import BookieFactory, BookieProcess

PASSWORD = b"recover"
FAST_EXPIRY = {"zkTimeout": "4000"}  # a killed bookie's registration goes 4 s after a kill -9


def pybk_shell(zk: str, *args: str, as_json: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pybk", "shell", "--zk", zk, *(["--json"] if as_json else []), *args],
        check=False, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )


async def ledger_on(bk: BookKeeper, bookie_id: str) -> WriteHandle:
    """A new E3 Qw2 Qa2 ledger whose ensemble holds ``bookie_id``."""
    for _ in range(50):
        handle = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
        if bookie_id in handle.ensemble:
            return handle
        await handle.close()
    raise AssertionError(f"no ensemble with {bookie_id} in 50 tries")


async def new_cluster(
    zk_hosts: str, bookie_factory: BookieFactory, count: int, conf: dict[str, str] | None = None
) -> list[BookieProcess]:
    """A fresh cluster's metadata and ``count`` bookie processes on it."""
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    return [await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=conf) for _ in range(count)]


def replicas_hold_every_entry(md: LedgerMetadata, ledger_id: int, addresses: dict[str, str]) -> None:
    """Each entry is on every bookie its write set names (raw reads, one bookie at a time)."""
    distribution = RoundRobinDistribution(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
    for entry_id in range(md.last_entry_id + 1):
        ensemble = md.ensemble_for(entry_id)
        for slot in distribution.write_set(entry_id):
            with grpc.insecure_channel(addresses[ensemble[slot]]) as channel:
                reply = bookie_pb2_grpc.BookieStub(channel).ReadEntry(  # type: ignore[no-untyped-call]
                    bookie_pb2.ReadRequest(ledger_id=ledger_id, entry_id=entry_id), timeout=10
                )
            assert reply.status == bookie_pb2.EOK, (ledger_id, entry_id, ensemble[slot])
