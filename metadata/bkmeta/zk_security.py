"""The cluster's ZooKeeper identity and the ACLs of the znodes it creates (``zkEnableSecurity``).

Every bookie, client and tool of a secured cluster shares one ZooKeeper digest identity,
``user:password`` read from the file named by ``zkDigestAuthFile`` (never from a command line,
where ``ps`` would show it). Each session authenticates with it; with ``zkEnableSecurity=true``
every znode created (ledgers, layout, cookies, registrations, id generators, named logs,
underreplication) gets an ACL giving that identity every permission and nobody else any, so a
client without the credentials can neither read (the metadata holds ledger passwords) nor delete
or rewrite metadata. ``pybk shell fixzkacls`` applies the ACL to the znodes of a cluster made
before (ZooKeeper ACLs are per node, never inherited).

TLS to ZooKeeper's secure client port (``secureClientPort``): ``zkTlsTrustStore`` (PEM CA;
set, sessions use TLS and check ZooKeeper's certificate and its name; kazoo also trusts the
system's CAs, which is why the name is checked too), with ``zkTlsCertificatePath`` and
``zkTlsKeyStore`` when ZooKeeper asks for a client certificate. Without TLS the digest travels
in clear in ZooKeeper's protocol: keep ZooKeeper on a trusted network then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.security import make_digest_acl

from bkproto.errors import IncorrectParameterError

CLIENT_CONF_ENV = "PYBK_CLIENT_CONF"  # the client's properties file (``bkclient.tls``)


@dataclass(frozen=True)
class ZkSecurity:
    """How a session reaches ZooKeeper: its digest identity (and whether new znodes get its ACL),
    and TLS to ZooKeeper's secure client port."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    enable_acls: bool = False  # zkEnableSecurity: new znodes get the cluster's ACL
    tls_trust: Path | None = None  # zkTlsTrustStore: PEM CA of ZooKeeper's certificate; set, TLS is on
    tls_cert: Path | None = None  # zkTlsCertificatePath: PEM client certificate, if ZooKeeper asks
    tls_key: Path | None = None  # zkTlsKeyStore: its PEM key

    def __post_init__(self) -> None:
        if self.enable_acls and self.user is None:
            raise IncorrectParameterError("zkEnableSecurity=true needs zkDigestAuthFile")
        if self.tls_cert is not None and self.tls_trust is None:
            raise IncorrectParameterError("zkTlsCertificatePath needs zkTlsTrustStore (TLS to ZooKeeper)")

    @classmethod
    def from_file(cls, path: Path, enable_acls: bool = True, **tls: Path | None) -> ZkSecurity:
        """``user:password`` from the first line of ``path``; ``tls``: the ``tls_*`` fields."""
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise IncorrectParameterError(f"cannot read zkDigestAuthFile {path}: {exc}") from exc
        user, sep, password = text.partition(":")
        if not sep or not user or not password or ":" in user:
            raise IncorrectParameterError(f"zkDigestAuthFile {path}: expected user:password")
        return cls(user, password, enable_acls, **tls)  # type: ignore[arg-type]

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")] if self.user is not None else []

    @property
    def acl(self) -> list[Any]:
        """The cluster's ACL: every permission for its identity, none for anyone else."""
        if self.user is None or self.password is None:
            raise IncorrectParameterError("no ZooKeeper identity (zkDigestAuthFile) to give an ACL to")
        return [make_digest_acl(self.user, self.password, all=True)]

    def kazoo_options(self) -> dict[str, Any]:
        """``KazooClient`` arguments: authenticate, with ACLs on create with the ACL, and TLS
        (verifying ZooKeeper's certificate and its name)."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options["auth_data"] = self.auth_data
        if self.enable_acls:
            options["default_acl"] = self.acl
        if self.tls_trust is not None:
            options.update(use_ssl=True, ca=str(self.tls_trust), verify_certs=True, check_hostname=True)
            if self.tls_cert is not None:
                options.update(certfile=str(self.tls_cert),
                               keyfile=str(self.tls_key) if self.tls_key is not None else None)
        return options


ZK_KEYS = ("zkEnableSecurity", "zkDigestAuthFile", "zkTlsTrustStore", "zkTlsCertificatePath", "zkTlsKeyStore")


def zk_security_from_settings(values: Mapping[str, str]) -> ZkSecurity | None:
    """From BookKeeper-named keys (``zkEnableSecurity``, ``zkDigestAuthFile``); None if unset."""
    enable = values.get("zkEnableSecurity", "false").strip().lower() == "true"
    digest_file = values.get("zkDigestAuthFile")
    tls = {field_name: Path(values[key]) if values.get(key) else None for key, field_name in (
        ("zkTlsTrustStore", "tls_trust"), ("zkTlsCertificatePath", "tls_cert"), ("zkTlsKeyStore", "tls_key"))}
    if digest_file:
        return ZkSecurity.from_file(Path(digest_file), enable, **tls)
    if enable or any(tls.values()):
        return ZkSecurity(None, None, enable, **tls)  # type: ignore[arg-type]
    return None


def zk_security_from_environ(environ: Mapping[str, str] | None = None) -> ZkSecurity | None:
    """From ``BK_<key>`` variables (``ZK_KEYS``) over the file ``PYBK_CLIENT_CONF``."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    conf = environ.get(CLIENT_CONF_ENV)
    if conf:
        try:
            lines = Path(conf).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise IncorrectParameterError(f"cannot read {CLIENT_CONF_ENV}={conf}: {exc}") from exc
        for line in lines:
            key, sep, value = line.strip().partition("=")
            if sep and key.strip() in ZK_KEYS:
                values[key.strip()] = value.strip()
    for key in ZK_KEYS:
        if f"BK_{key}" in environ:
            values[key] = environ[f"BK_{key}"]
    return zk_security_from_settings(values)
