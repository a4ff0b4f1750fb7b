"""The operator's cookie tools on real bookie processes and a real ZooKeeper: ``cookie_get``,
``cookie_delete``, ``bookieformat`` and ``whatisinstanceid``. The path they exist for: a bookie's
disk is replaced, its ledgers are re-replicated, its data and cookie are wiped, and the same id
starts again empty. And the guards: nothing is deleted under a running bookie, nor a cookie while
ledgers still count on the bookie's replicas, unless forced."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.bookies import BookieFactory, BookieProcess, BookieStartError, bookieformat_args
from tests.support.recover_cluster import new_cluster, pybk_shell

from bkclient import BookKeeper, DigestType

pytestmark = pytest.mark.integration

PASSWORD = b"cookies"


def current_dirs(bookie: BookieProcess) -> list[Path]:
    return [d / "current" for d in (*bookie.journal_dirs, *bookie.ledger_dirs)]


def run_json(zk: str, *args: str) -> dict[str, object]:
    done = pybk_shell(zk, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


async def _closed_ledger(zk_hosts: str, ensemble: int) -> int:
    async with await BookKeeper.connect(zk_hosts) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) >= ensemble, 30.0)
        handle = await bk.create_ledger(ensemble, 2, 2, DigestType.CRC32C, PASSWORD)
        for i in range(20):
            await handle.append(b"entry %d" % i)
        await handle.close()
        return handle.ledger_id


async def test_a_replaced_disk_is_recovered_formatted_and_the_bookie_rejoins_empty(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    victim = bookies[0]
    ledger_id = await _closed_ledger(zk_hosts, 3)  # E3 on 3 bookies: it names the victim

    cookie = await asyncio.to_thread(run_json, zk_hosts, "cookie_get", victim.bookie_id)
    instance = await asyncio.to_thread(run_json, zk_hosts, "whatisinstanceid")
    assert cookie["bookie_host"] == victim.bookie_id
    assert cookie["journal_dirs"] == [str(d.resolve()) for d in victim.journal_dirs]
    assert cookie["ledger_dirs"] == [str(d.resolve()) for d in victim.ledger_dirs]
    assert cookie["instance_id"] == instance["instance_id"]

    # While it runs: its cookie and its files stay.
    running = await asyncio.to_thread(pybk_shell, zk_hosts, "cookie_delete", victim.bookie_id, "-f")
    assert running.returncode == 1 and "running" in running.stderr
    refused = await asyncio.to_thread(pybk_shell, zk_hosts, *bookieformat_args(victim, "-f"))
    assert refused.returncode == 1 and "running" in refused.stderr
    assert all(d.is_dir() for d in current_dirs(victim))

    # Stopped, with a ledger still counting on it: the cookie stays, and so do the files.
    assert await asyncio.to_thread(victim.stop) == 0
    named = await asyncio.to_thread(pybk_shell, zk_hosts, "cookie_delete", victim.bookie_id)
    assert named.returncode == 1 and f"({ledger_id})" in named.stderr and "recover" in named.stderr
    named = await asyncio.to_thread(pybk_shell, zk_hosts, *bookieformat_args(victim, "-d", "-f"))
    assert named.returncode == 1 and f"({ledger_id})" in named.stderr
    assert all(d.is_dir() for d in current_dirs(victim))
    await asyncio.to_thread(run_json, zk_hosts, "cookie_get", victim.bookie_id)

    # Its data re-replicated onto a fourth bookie, then asked first: no answer, nothing done.
    await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    await asyncio.to_thread(run_json, zk_hosts, "recover", victim.bookie_id, "-f")
    unanswered = await asyncio.to_thread(pybk_shell, zk_hosts, *bookieformat_args(victim, "-d"))
    assert unanswered.returncode == 2 and "-f" in unanswered.stderr
    assert all(d.is_dir() for d in current_dirs(victim))

    mismatched = bookieformat_args(victim, "-d", "-f", "--bookieid", "10.9.9.9:1")
    other = await asyncio.to_thread(pybk_shell, zk_hosts, *mismatched)
    assert other.returncode == 2 and "not of --bookieid" in other.stderr  # the dirs are another's
    formatted = await asyncio.to_thread(run_json, zk_hosts, *bookieformat_args(victim, "-d", "-f"))
    assert formatted["bookie_ids"] == [victim.bookie_id]
    assert formatted["cookies_deleted"] == [victim.bookie_id]
    marks = [str(d.resolve() / "lastMark") for d in victim.ledger_dirs]
    wiped = sorted(str(d.resolve()) for d in current_dirs(victim)) + marks
    assert sorted(formatted["wiped"]) == sorted(wiped)  # type: ignore[arg-type]
    assert not any(d.exists() for d in current_dirs(victim))
    gone = await asyncio.to_thread(pybk_shell, zk_hosts, "cookie_get", victim.bookie_id)
    assert gone.returncode == 1 and "no cookie" in gone.stderr

    # The same id starts again, empty, with a new cookie; the ledger reads back in full.
    await asyncio.to_thread(victim.start)
    fresh = await asyncio.to_thread(run_json, zk_hosts, "cookie_get", victim.bookie_id)
    assert fresh["version"] == 0 and fresh["instance_id"] == instance["instance_id"]
    assert not list(victim.ledger_dirs[0].glob("current/*.log"))  # no entry log came back
    async with await BookKeeper.connect(zk_hosts) as bk:
        reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
        assert [e.data async for e in reader.read(0, 19)] == [b"entry %d" % i for i in range(20)]


async def test_a_forced_cookie_delete_leaves_the_old_directories_refused_until_formatted(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    victim = bookies[1]
    await _closed_ledger(zk_hosts, 3)
    assert await asyncio.to_thread(victim.stop) == 0

    forced = await asyncio.to_thread(pybk_shell, zk_hosts, "cookie_delete", victim.bookie_id, "-f")
    assert forced.returncode == 0, forced.stderr
    assert "warning" in forced.stderr and "1 ledger(s)" in forced.stderr
    # Its directories still carry the old cookie: they belong to no registered bookie now.
    with pytest.raises(BookieStartError):
        await asyncio.to_thread(victim.start, 60.0)
    refusal = victim.run_log_text()
    assert "does not exist" in refusal and "pybk shell bookieformat" in refusal  # what to do

    # Formatting finds the bookie by the cookie its directories hold, and asks on stdin.
    answered = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pybk", "shell", "--zk", zk_hosts, *bookieformat_args(victim)],
        input="y\n", capture_output=True, text=True, timeout=120, check=False,
    )
    assert answered.returncode == 0, answered.stderr
    assert victim.bookie_id in answered.stderr  # the question names the bookie
    assert not any(d.exists() for d in current_dirs(victim))
    await asyncio.to_thread(victim.start)
    await asyncio.to_thread(run_json, zk_hosts, "cookie_get", victim.bookie_id)


async def test_a_wholly_replaced_bookie_is_formatted_by_name_from_its_conf_file(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    victim = bookies[2]
    assert await asyncio.to_thread(victim.stop) == 0
    for directory in (*victim.journal_dirs, *victim.ledger_dirs):  # every disk replaced
        shutil.rmtree(directory / "current")
    with pytest.raises(BookieStartError):
        await asyncio.to_thread(victim.start, 60.0)
    assert f"bookieformat -d --bookieid {victim.bookie_id}" in victim.run_log_text()

    # The operator's own conf file names the dirs and ZooKeeper; the shell is given neither.
    conf = victim.base_dir / "format.conf"
    conf.write_text(
        f"zkServers={zk_hosts}\n"
        f"journalDirectories={','.join(map(str, victim.journal_dirs))}\n"
        f"ledgerDirectories={','.join(map(str, victim.ledger_dirs))}\n"
    )
    base = [sys.executable, "-m", "pybk", "shell", "--json", "bookieformat", "--conf", str(conf), "-d", "-f"]
    unnamed = await asyncio.to_thread(
        subprocess.run, base, capture_output=True, text=True, timeout=120, check=False
    )
    assert unnamed.returncode == 2 and "--bookieid" in unnamed.stderr
    named = await asyncio.to_thread(
        subprocess.run, [*base, "--bookieid", victim.bookie_id], capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["cookies_deleted"] == [victim.bookie_id]
    await asyncio.to_thread(victim.start)
