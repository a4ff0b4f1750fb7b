"""Helpers for security tests: a throw-away CA with certificates for a bookie and for client
identities, token and rights files, and the bookie and client settings that use them.

``SecurityMaterial.create(directory)`` makes:
    ca.pem; bookie.pem/.key (CN "bookie"); writer, reader, admin, stranger .pem/.key (client
    certificates of those identities); tokens (writer-token, reader-token, admin-token);
    rights: writer=read,write,fence; reader=read; admin=all; ``*`` (anyone else)=nothing.
``bookie_conf(mtls=..., tokens=...)`` the bookie's keys; ``client(name)`` / ``client_token(name)``
the ``ClientSecurity`` of an identity by certificate / by token (trusting the CA, no certificate);
``anonymous()`` TLS without any identity.

ZooKeeper: ``write_digest_file(path)`` a ``zkDigestAuthFile``; ``kazoo_session(hosts, auth)`` a
plain kazoo session; ``all_znodes(client, root)`` a subtree's paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from kazoo.client import KazooClient

from bkclient.tls import ClientSecurity
from pybk.localcluster.certs import CertFiles, ThrowAwayCa

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
        return cls(directory, ca, bookie, clients, tokens_file, rights_file)

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
def kazoo_session(hosts: str, auth: list[tuple[str, str]] | None = None) -> Iterator[KazooClient]:
    """A plain kazoo session (with ``auth``: authenticated) for looking at znodes directly."""
    client = KazooClient(hosts=hosts, timeout=10.0, auth_data=auth)
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
