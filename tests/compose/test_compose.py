"""deploy/docker-compose.yml for real: built, started and used from the host as the README says,
a bookie container killed for good while a writer writes, autorecovery re-replicating its
entries, and ``down -v`` leaving nothing behind. Run by ``make test-compose`` (needs a Docker
engine; see the Makefile for how it is started and which base images it uses)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.compose import REPO, ComposeProject, running_cluster

from bkclient import BookKeeper

pytestmark = pytest.mark.compose

BOOKIES = ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]
BOOKIE_IDS = {f"bookie-{i}": f"127.0.0.1:318{i}" for i in range(1, 5)}
ZK = "127.0.0.1:2181"
PASSWORD = b"compose"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComposeProject]:
    project = ComposeProject("pybk-compose-test", {"LOST_BOOKIE_RECOVERY_DELAY": "0"})
    with running_cluster(project):
        yield project


def _readme_python_example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("**2. Write and read a ledger from Python (asyncio).**", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match, "the README's asyncio example is gone"
    return match.group(1)


def test_the_readme_examples_work_from_the_host(cluster: ComposeProject, tmp_path: Path) -> None:
    pybk = Path(sys.executable).with_name("pybk")
    simple = subprocess.run([str(pybk), "shell", "--zk", ZK, "simpletest", "-e", "3", "-w", "2", "-a", "2",
                             "-n", "1000"], capture_output=True, text=True, timeout=120, check=False)
    assert simple.returncode == 0, simple.stdout + simple.stderr

    script = tmp_path / "hello_async.py"
    script.write_text(_readme_python_example())
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 b'hello'" in done.stdout and "entries 0 .. 199" in done.stdout

    listed = subprocess.run([str(pybk), "shell", "--zk", ZK, "--json", "listbookies"], capture_output=True,
                            text=True, timeout=60, check=True)
    assert set(BOOKIE_IDS.values()) <= set(re.findall(r"127\.0\.0\.1:318\d", listed.stdout))


def test_prometheus_scrapes_every_target(cluster: ComposeProject) -> None:
    deadline = time.monotonic() + 90  # a scrape every 10 s
    while True:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=10) as response:
            targets = json.load(response)["data"]["activeTargets"]
        health = {t["scrapeUrl"]: t["health"] for t in targets}
        if len(health) == 5 and set(health.values()) == {"up"}:
            return
        assert time.monotonic() < deadline, f"Prometheus targets not all up: {health}"
        time.sleep(3)


def test_a_bookie_lost_for_good_writers_carry_on_and_autorecovery_copies(cluster: ComposeProject) -> None:
    asyncio.run(_lose_a_bookie(cluster))


async def _lose_a_bookie(cluster: ComposeProject) -> None:
    async with await BookKeeper.connect(ZK) as bk:
        wh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        victim_id = wh.metadata.segments[0].bookies[1]
        victim = next(name for name, bid in BOOKIE_IDS.items() if bid == victim_id)
        written = [f"entry {i}".encode() for i in range(2000)]
        await asyncio.gather(*(wh.append_async(data) for data in written[:1000]))
        await asyncio.to_thread(cluster.kill, victim)
        await asyncio.gather(*(wh.append_async(data) for data in written[1000:]))  # no error: carried on
        await wh.close()
        assert victim_id not in wh.metadata.last_ensemble

        rh = await bk.open_ledger(wh.ledger_id, PASSWORD)
        assert [e.data async for e in rh.read(0, 1999)] == written

        # Autorecovery (lostBookieRecoveryDelay 0 here) copies the victim's share to a live bookie.
        deadline = time.monotonic() + 180
        while victim_id in (await bk.ledger_metadata(wh.ledger_id)).all_bookies():
            assert time.monotonic() < deadline, f"{victim_id}'s entries were not re-replicated"
            await asyncio.sleep(2)
        rh = await bk.open_ledger(wh.ledger_id, PASSWORD)
        assert [e.data async for e in rh.read(0, 1999)] == written
