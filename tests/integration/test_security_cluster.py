"""Everything on at once: bookies with mutual TLS, tokens and rights, ZooKeeper over TLS with the
cluster's digest ACLs. An authorized client works end to end; an identity without the write right
cannot write; a plaintext ZooKeeper client does not get in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from tests.support.bookies import BookieFactory
from tests.support.security import SecureZooKeeper, kazoo_session, write_digest_file

from bkclient import BookKeeper, DigestType
from bkclient.config import ClientConfig
from bkclient.tls import ClientSecurity
from bkmeta import MetadataClient
from bkmeta.zk_security import ZkSecurity
from bkproto.errors import BKError, UnauthorizedAccessError

pytestmark = pytest.mark.integration

PASSWORD = b"all-on"


async def connect(secure_zk: SecureZooKeeper, zk: ZkSecurity, security: ClientSecurity) -> BookKeeper:
    return await BookKeeper.connect(secure_zk.secure_hosts, ClientConfig(security=security, zk_security=zk))


async def test_an_authorized_client_works_end_to_end_and_others_are_refused(
    secure_zk: SecureZooKeeper, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    material = secure_zk.material
    digest = write_digest_file(tmp_path / "zk-digest")
    zk = ZkSecurity.from_file(digest, True, tls_trust=material.ca)
    hosts = secure_zk.secure_hosts
    async with await MetadataClient.connect(hosts, require_cluster=False, security=zk) as meta:
        await meta.init_new_cluster()
    conf = {
        **material.bookie_conf(mtls=True, tokens=True),
        "zkEnableSecurity": "true", "zkDigestAuthFile": str(digest), "zkTlsTrustStore": str(material.ca),
    }
    for _ in range(3):
        await asyncio.to_thread(
            bookie_factory, zk=hosts, conf=conf, grpc_credentials=material.health_credentials()
        )

    async with await connect(secure_zk, zk, material.client("writer")) as bk:
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
        sent = [f"entry {i}".encode() for i in range(200)]
        await asyncio.gather(*(wh.append_async(data) for data in sent))
        await wh.close()
        ledger_id = wh.ledger_id

    # a reader (by certificate) reads it back, fencing nothing: the ledger is closed
    async with await connect(secure_zk, zk, material.client("reader")) as bk:
        rh = await bk.open_ledger(ledger_id, PASSWORD)
        assert [e.data async for e in rh.read(0, 199)] == sent
        # ... but may not write: the adds come back EUA and the handle fails with it
        await bk.ctx.bookie_watcher.wait_for(lambda w: len(w.writable_bookies()) == 3, 30.0)
        wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
        with pytest.raises(UnauthorizedAccessError):
            await wh.append(b"not allowed")

    # a writer by token (no client certificate: these bookies require one) does not get in
    with pytest.raises(BKError):  # the TLS handshake fails: no bookie can take the adds
        async with await connect(secure_zk, zk, material.client_token("writer")) as bk:
            wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, PASSWORD)
            await asyncio.wait_for(wh.append(b"no certificate"), 30)

    # ZooKeeper: the secure port does not speak plaintext, and without the digest nothing is readable
    plain = KazooClient(hosts=secure_zk.secure_hosts, timeout=5)
    with pytest.raises(KazooTimeoutError):
        plain.start(timeout=5)
    plain.close()
    ca = str(material.ca)
    with kazoo_session(secure_zk.secure_hosts, None, use_ssl=True, ca=ca, verify_certs=True) as stranger:
        for path in ("/ledgers", "/ledgers/LAYOUT", "/ledgers/cookies"):
            with pytest.raises(NoAuthError):
                stranger.get(path)
