"""An operator switching from Java BookKeeper keeps the configuration file: BookKeeper's stock
``bk_server.conf`` and Pulsar's stock ``bookkeeper.conf`` (tests/data) start a registered bookie
unchanged, only the directories, ports and ZooKeeper given by flags. The bookie takes writes and
reads, names once the BookKeeper keys it ignores, and answers BookKeeper's
``/api/v1/config/server_config`` with the file's values."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from tests.support.bookies import BookieFactory, entry_body

from bkmeta import MetadataClient
from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
KEY = b"k" * 20
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"


@pytest.mark.parametrize(
    ("conf_name", "expected"),
    [
        ("bk_server.conf", {"httpServerEnabled": "true", "ledgerStorageClass": None}),
        ("pulsar_bookkeeper.conf", {"zkTimeout": "30000", "gcWaitTime": "900000", "ledgerStorageClass": DB}),
    ],
)
async def test_stock_file_starts_a_bookie(
    zk_hosts: str, bookie_factory: BookieFactory, conf_name: str, expected: dict[str, str | None]
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf_file=DATA / conf_name)

    with grpc.insecure_channel(bookie.address) as channel:
        stub = bookie_pb2_grpc.BookieStub(channel)
        body = entry_body(7, 0, -1, b"x")
        add = bookie_pb2.AddRequest(ledger_id=7, entry_id=0, master_key=KEY, body=body)
        assert stub.AddEntry(add, timeout=30).status == bookie_pb2.EOK
        read = stub.ReadEntry(bookie_pb2.ReadRequest(ledger_id=7, entry_id=0), timeout=30)
        assert (read.status, read.body) == (bookie_pb2.EOK, body)

    log = bookie.run_log_text()
    assert log.count("BookKeeper configuration keys accepted but not used by pybookkeeper") == 1

    served = json.loads(await asyncio.to_thread(http_get, bookie.http_port, "/api/v1/config/server_config"))
    for key, value in expected.items():
        assert served.get(key) == value, key
    assert served["journalDirectories"] == ",".join(map(str, bookie.journal_dirs))
    assert served["bookiePort"] == str(bookie.port)  # the flag's, over the file's 3181
    # BookKeeper's PUT changes a setting at runtime; here settings are read once: 501, saying so
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(http_put, bookie.http_port, "/api/v1/config/server_config", b'{"a": "1"}')
    assert refused.value.code == 501 and "restart" in json.loads(refused.value.read())["error"]


def http_get(port: int | None, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        return reply.read().decode()


def http_put(port: int | None, path: str, body: bytes) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read().decode()
