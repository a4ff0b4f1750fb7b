"""The shell reads the auditor's index as BookKeeper's shell does: ``listunderreplicated`` lists
the marked ledgers with their missing replicas, ``queryautorecoverystatus`` also says who holds
each ledger's lock."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support.recover_cluster import pybk_shell

from bkmeta.metadata_client import MetadataClient
from bkmeta.underreplication import UnderreplicationIndex

pytestmark = pytest.mark.integration


async def test_the_shell_lists_the_marked_ledgers_and_who_repairs_them(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
        index = UnderreplicationIndex(meta.zk, meta.layout, "worker-host:42")
        await index.mark(7, frozenset({"10.0.0.1:3181"}))
        await index.mark(2**33, frozenset({"10.0.0.2:3181", "10.0.0.3:3181"}))
        assert await index.try_lock(7)

        listed = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["ledgers"] == [
            {"ledger_id": 7, "missing_replicas": ["10.0.0.1:3181"]},
            {"ledger_id": 2**33, "missing_replicas": ["10.0.0.2:3181", "10.0.0.3:3181"]},
        ]
        only = await asyncio.to_thread(pybk_shell, zk_hosts, "listunderreplicated", "--missingreplica",
                                       "10.0.0.3:3181")
        assert [lg["ledger_id"] for lg in json.loads(only.stdout)["ledgers"]] == [2**33]

        status = await asyncio.to_thread(pybk_shell, zk_hosts, "queryautorecoverystatus")
        assert status.returncode == 0, status.stderr
        found = json.loads(status.stdout)
        assert found["enabled"] is True and found["auditor"] is None
        assert [(lg["ledger_id"], lg["being_repaired_by"]) for lg in found["ledgers"]] == [
            (7, "worker-host:42"), (2**33, None)]
        text = await asyncio.to_thread(pybk_shell, zk_hosts, "queryautorecoverystatus", "-v", as_json=False)
        assert "being repaired by worker-host:42, missing 10.0.0.1:3181" in text.stdout
