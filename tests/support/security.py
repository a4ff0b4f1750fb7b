"""Helpers for security tests: a throw-away CA with certificates for a bookie and for client
identities, token and rights files, and the bookie and client settings that use them.

``SecurityMaterial.create(directory)`` makes:
    ca.pem; bookie.pem/.key (CN "bookie"); writer, reader, admin, stranger .pem/.key (client
    certificates of those identities); tokens (writer-token, reader-token, admin-token);
    rights: writer=read,write,fence; reader=read; admin=all; ``*`` (anyone else)=nothing.
``bookie_conf(mtls=..., tokens=...)`` the bookie's keys; ``client(name)`` / ``client_token(name)``
the ``ClientSecurity`` of an identity by certificate / by token (trusting the CA, no certificate);
``anonymous()`` TLS without any identity.
``token_cluster(secure_zk, bookie_factory, directory)``: three bookies taking TLS with tokens and
rights in ``secure_zk`` with digest ACLs; returns a writer's client settings (BookKeeper key names).

ZooKeeper: ``write_digest_file(path)`` a ``zkDigestAuthFile``; ``kazoo_session(hosts, auth)`` a
plain kazoo session; ``all_znodes(client, root)`` a subtree's paths. Fixture ``secure_zk``
(module scope): a ZooKeeper with a TLS client port, as ``SecureZooKeeper(server, material,
secure_hosts)``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient

from bkclient.tls import ClientSecurity
from bkmeta import MetadataClient
from bkmeta.zk_security import ZkSecurity
from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer, free_port
from pybk.localcluster.certs import CertFiles, ThrowAwayCa
from tests.support.bookies import BookieFactory

IDENTITIES = ("writer", "reader", "admin", "stranger")
TOKENS = {"writer": "writer-token-0123456789", "reader": "reader-token-0123456789",
          "admin": "admin-token-0123456789"}  # fmt: skip
RIGHTS = "writer=read,write,fence\nreader=read\nadmin=all\n*=\n"


@dataclass(frozen=True)
class SecurityMaterial:
    directory: Path
    ca: Path
    bookie: CertFiles
    clients: dict[str, CertFiles]
    tokens_file: Path
    rights_file: Path
    zk_keystore: Path  # ZooKeeper's PEM keystore: its PKCS#8 key and certificate in one file

    @classmethod
    def create(cls, directory: Path) -> SecurityMaterial:
        authority = ThrowAwayCa()
        directory.mkdir(parents=True, exist_ok=True)
        ca = authority.write_ca(directory / "ca.pem")
        bookie = authority.issue("bookie", directory)
        clients = {name: authority.issue(name, directory) for name in IDENTITIES}
        tokens_file = directory / "tokens"
        tokens_file.write_text("".join(f"{name}={token}\n" for name, token in TOKENS.items()))
        rights_file = directory / "rights"
        rights_file.write_text(RIGHTS)
        zookeeper = authority.issue("zookeeper", directory)
        zk_keystore = directory / "zookeeper-keystore.pem"
        zk_keystore.write_bytes(zookeeper.key.read_bytes() + zookeeper.cert.read_bytes())
        return cls(directory, ca, bookie, clients, tokens_file, rights_file, zk_keystore)

    def bookie_conf(self, *, mtls: bool = True, tokens: bool = True, auth: bool = True) -> dict[str, str]:
        conf = {
            "tlsCertificatePath": str(self.bookie.cert),
            "tlsKeyStore": str(self.bookie.key),
            "tlsKeyStoreType": "PEM",
            "tlsTrustStore": str(self.ca),
            "tlsClientAuthentication": str(mtls).lower(),
        }
        providers = [name for name, on in (("mtls", mtls), ("token", tokens)) if on]
        if auth and providers:
            conf["bookieAuthProviderFactoryClass"] = ",".join(providers)
            conf["bookieAuthorizationFile"] = str(self.rights_file)
        if auth and tokens:
            conf["bookieAuthTokenFile"] = str(self.tokens_file)
        return conf

    def client(self, name: str) -> ClientSecurity:
        files = self.clients[name]
        return ClientSecurity(self.ca, files.cert, files.key)

    def client_token(self, name: str) -> ClientSecurity:
        return ClientSecurity(self.ca, token=TOKENS.get(name, f"{name}-unknown-token"))

    def anonymous(self) -> ClientSecurity:
        return ClientSecurity(self.ca)

    def health_credentials(self, name: str = "admin") -> grpc.ChannelCredentials:
        """Channel credentials good enough for a health check (a client certificate, when the
        bookie asks for one)."""
        files = self.clients[name]
        return grpc.ssl_channel_credentials(
            self.ca.read_bytes(), files.key.read_bytes(), files.cert.read_bytes()
        )


def write_digest_file(path: Path, user: str = "bkcluster", password: str = "s3cret-digest") -> Path:
    """A ``zkDigestAuthFile``: the cluster's ZooKeeper identity."""
    path.write_text(f"{user}:{password}\n")
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def kazoo_session(
    hosts: str, auth: list[tuple[str, str]] | None = None, **options: Any
) -> Iterator[KazooClient]:
    """A plain kazoo session (with ``auth``: authenticated; ``options``: e.g. TLS) for looking
    at znodes directly."""
    client = KazooClient(hosts=hosts, timeout=10.0, auth_data=auth, **options)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def all_znodes(client: KazooClient, root: str) -> list[str]:
    """``root`` and every znode below it."""
    found, pending = [], [root]
    while pending:
        path = pending.pop()
        found.append(path)
        pending.extend(f"{path.rstrip('/')}/{child}" for child in client.get_children(path))
    return found


@dataclass(frozen=True)
class SecureZooKeeper:
    server: ZooKeeperServer
    material: SecurityMaterial
    secure_hosts: str  # 127.0.0.1:<secureClientPort>


@pytest.fixture(scope="module")
def secure_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureZooKeeper]:
    base = tmp_path_factory.mktemp("secure-zk")
    material = SecurityMaterial.create(base / "pki")
    config = ZooKeeperConfig(
        data_dir=base / "zookeeper", port=free_port(), secure_port=free_port(),
        tls_keystore=material.zk_keystore,
    )
    server = ZooKeeperServer(config)
    (base / "zookeeper").mkdir()
    with (base / "zookeeper.log").open("wb") as log_file:
        server.start(stdout=log_file.fileno(), stderr=log_file.fileno())
        try:
            try:
                server.wait_ready()
            except Exception as e:
                tail = (base / "zookeeper.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"secure ZooKeeper did not start: {e}\n{tail}") from e
            yield SecureZooKeeper(server, material, f"127.0.0.1:{config.secure_port}")
        finally:
            server.stop()


async def token_cluster(
    secure_zk: SecureZooKeeper, bookie_factory: BookieFactory, directory: Path
) -> dict[str, str]:
    """Three bookies taking TLS with tokens (no client certificate needed) and checking rights,
    registered in ``secure_zk`` over TLS with the cluster's digest ACLs. Returns the settings of
    the ``writer`` identity's client, as files: ``zkServers``, the CA, a token file and the
    ZooKeeper keys (``zkEnableSecurity``, ``zkDigestAuthFile``, ``zkTlsTrustStore``)."""
    material = secure_zk.material
    digest = write_digest_file(directory / "zk-digest")
    zk_security = ZkSecurity.from_file(digest, True, tls_trust=material.ca)
    async with await MetadataClient.connect(
        secure_zk.secure_hosts, require_cluster=False, security=zk_security
    ) as meta:
        await meta.init_new_cluster()
    zk_settings = {
        "zkEnableSecurity": "true", "zkDigestAuthFile": str(digest), "zkTlsTrustStore": str(material.ca),
    }
    conf = {**material.bookie_conf(mtls=False, tokens=True), **zk_settings}
    health = material.health_credentials()  # the bookies' gRPC port is TLS too
    for _ in range(3):
        await asyncio.to_thread(bookie_factory, zk=secure_zk.secure_hosts, conf=conf, grpc_credentials=health)
    token_file = directory / "writer-token"
    token_file.write_text(TOKENS["writer"] + "\n")
    token_file.chmod(0o600)
    return {
        "zkServers": secure_zk.secure_hosts, "clientTrustStore": str(material.ca),
        "clientAuthTokenFile": str(token_file), **zk_settings,
    }
