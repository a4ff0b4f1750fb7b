"""``host``: the bookie-core tests that hold for every storage run once over DbLedgerStorage
(real files under tmp_path) and once over the simulation's MemoryLedgerStorage."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.storage_helpers import BookieHost, InMemoryHost, OnDiskHost, make_config


@pytest.fixture(params=["db", "memory"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> BookieHost:
    if request.param == "db":
        return OnDiskHost(make_config(tmp_path))
    return InMemoryHost()
