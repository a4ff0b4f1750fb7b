"""ZooKeeper ACLs (``zkEnableSecurity``): a secured cluster's znodes, made by ``initnewcluster``,
bookies (cookies, registrations) and clients (ledgers, id generators, named logs), belong to the
cluster's digest identity; a session without it can neither read, rewrite nor delete them; and
``fixzkacls`` secures a cluster made before."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE
from tests.support.bookies import BookieFactory
from tests.support.security import all_znodes, kazoo_session, write_digest_file

from bkclient import BookKeeper, DigestType
from bkclient.config import ClientConfig
from bkclient.context import ClientContext
from bkmeta import MetadataClient
from bkmeta.named_log import LogStore
from bkmeta.zk_security import ZkSecurity
from bkproto.errors import MetadataStoreError

pytestmark = pytest.mark.integration

PASSWORD = b"acl"


def split(zk_hosts: str) -> tuple[str, str]:
    """``host:port/chroot`` -> (``host:port``, ``/chroot``)."""
    hosts, _, chroot = zk_hosts.partition("/")
    return hosts, "/" + chroot


async def write_a_ledger_and_a_log(zk_hosts: str, security: ZkSecurity | None) -> int:
    meta = await MetadataClient.connect(zk_hosts, security=security)
    async with BookKeeper(ClientContext.create(meta, ClientConfig())) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 2, 30.0)
        wh = await bk.create_ledger(2, 2, 2, DigestType.CRC32C, PASSWORD)
        await wh.append(b"secured")
        await wh.close()
        await LogStore(meta.zk).ensure("events")
        return wh.ledger_id


async def test_a_secured_cluster_refuses_sessions_without_its_identity(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    digest = write_digest_file(tmp_path / "zk-digest")
    security = ZkSecurity.from_file(digest)
    async with await MetadataClient.connect(zk_hosts, require_cluster=False, security=security) as meta:
        await meta.init_new_cluster()
    conf = {"zkEnableSecurity": "true", "zkDigestAuthFile": str(digest)}
    for _ in range(2):
        await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=conf)
    ledger_id = await write_a_ledger_and_a_log(zk_hosts, security)

    hosts, chroot = split(zk_hosts)
    with kazoo_session(zk_hosts, security.auth_data) as owner:
        # every znode made (layout, instance id, cookies, registrations, id generator, ledgers,
        # underreplication, named logs) carries the cluster's ACL and no other
        znodes = all_znodes(owner, "/ledgers") + all_znodes(owner, "/pybk")
        assert len(znodes) > 10
        assert {tuple(owner.get_acls(path)[0]) for path in znodes} == {tuple(security.acl)}
        ledger_path = next(p for p in znodes if p.endswith(f"L{ledger_id:04d}"))
        cookie = next(p for p in znodes if "/cookies/" in p)
    for auth in (None, [("digest", "bkcluster:wrong-password")]):
        with kazoo_session(zk_hosts, auth) as stranger:
            for path in (ledger_path, cookie, "/ledgers/LAYOUT", "/pybk/logs/events"):
                with pytest.raises(NoAuthError):
                    stranger.get(path)
                with pytest.raises(NoAuthError):
                    stranger.set(path, b"rewritten")
            with pytest.raises(NoAuthError):
                stranger.delete(ledger_path)
    # the library says why, rather than failing obscurely
    with pytest.raises(MetadataStoreError, match="ACL"):
        async with await MetadataClient.connect(zk_hosts, security=None):
            pass
    # the owner still reads its ledger back
    meta = await MetadataClient.connect(zk_hosts, security=security)
    async with BookKeeper(ClientContext.create(meta, ClientConfig())) as bk:
        rh = await bk.open_ledger(ledger_id, PASSWORD)
        assert [e.data async for e in rh.read(0, 0)] == [b"secured"]
    with kazoo_session(hosts, security.auth_data) as owner:
        owner.delete(chroot, recursive=True)  # the fixture's own session may not


async def test_fixzkacls_secures_a_cluster_made_without_acls(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False, security=None) as meta:
        await meta.init_new_cluster()
    for _ in range(2):
        await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    ledger_id = await write_a_ledger_and_a_log(zk_hosts, None)
    with kazoo_session(zk_hosts) as anyone:
        assert anyone.get_acls("/ledgers/LAYOUT")[0] == OPEN_ACL_UNSAFE

    digest = write_digest_file(tmp_path / "zk-digest")
    env = {**os.environ, "BK_zkEnableSecurity": "true", "BK_zkDigestAuthFile": str(digest)}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "pybk", "shell", "--zk", zk_hosts, "fixzkacls"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    security = ZkSecurity.from_file(digest)
    with kazoo_session(zk_hosts, security.auth_data) as owner:
        znodes = all_znodes(owner, "/ledgers") + all_znodes(owner, "/pybk")
        # (the bookies' registrations may be re-created by their sessions: they still hold
        # the old credentials-free setup, so only persistent znodes are checked)
        persistent = [p for p in znodes if owner.exists(p).ephemeralOwner == 0]
        assert {tuple(owner.get_acls(p)[0]) for p in persistent} == {tuple(security.acl)}
        ledger_path = next(p for p in znodes if p.endswith(f"L{ledger_id:04d}"))
    with kazoo_session(zk_hosts) as stranger:
        with pytest.raises(NoAuthError):
            stranger.delete(ledger_path)
        with pytest.raises(NoAuthError):
            stranger.set("/ledgers/LAYOUT", b"rewritten")
    hosts, chroot = split(zk_hosts)
    with kazoo_session(hosts, security.auth_data) as owner:
        owner.delete(chroot, recursive=True)
