"""The cluster's ZooKeeper identity and the ACLs of the znodes it creates (``zkEnableSecurity``).

Every bookie, client and tool of a secured cluster shares one ZooKeeper digest identity,
``user:password`` read from the file named by ``zkDigestAuthFile`` (never from a command line,
where ``ps`` would show it). Each session authenticates with it; with ``zkEnableSecurity=true``
every znode created (ledgers, layout, cookies, registrations, id generators, named logs,
underreplication) gets an ACL giving that identity every permission and nobody else any, so a
client without the credentials can neither read (the metadata holds ledger passwords) nor delete
or rewrite metadata. ``pybk shell fixzkacls`` applies the ACL to the znodes of a cluster made
before (ZooKeeper ACLs are per node, never inherited).

The digest travels in clear in ZooKeeper's protocol: keep ZooKeeper on a trusted network or
behind TLS.
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
    user: str
    password: str = field(repr=False)
    enable_acls: bool = True  # zkEnableSecurity: new znodes get the cluster's ACL

    @classmethod
    def from_file(cls, path: Path, enable_acls: bool = True) -> ZkSecurity:
        """``user:password`` from the first line of ``path``."""
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise IncorrectParameterError(f"cannot read zkDigestAuthFile {path}: {exc}") from exc
        user, sep, password = text.partition(":")
        if not sep or not user or not password or ":" in user:
            raise IncorrectParameterError(f"zkDigestAuthFile {path}: expected user:password")
        return cls(user, password, enable_acls)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[Any]:
        """The cluster's ACL: every permission for its identity, none for anyone else."""
        return [make_digest_acl(self.user, self.password, all=True)]

    def kazoo_options(self) -> dict[str, Any]:
        """``KazooClient`` arguments: authenticate, and with ACLs on, create with the ACL."""
        options: dict[str, Any] = {"auth_data": self.auth_data}
        if self.enable_acls:
            options["default_acl"] = self.acl
        return options


def zk_security_from_settings(values: Mapping[str, str]) -> ZkSecurity | None:
    """From BookKeeper-named keys (``zkEnableSecurity``, ``zkDigestAuthFile``); None if unset."""
    enable = values.get("zkEnableSecurity", "false").strip().lower() == "true"
    digest_file = values.get("zkDigestAuthFile")
    if not digest_file:
        if enable:
            raise IncorrectParameterError("zkEnableSecurity=true needs zkDigestAuthFile")
        return None
    return ZkSecurity.from_file(Path(digest_file), enable)


def zk_security_from_environ(environ: Mapping[str, str] | None = None) -> ZkSecurity | None:
    """From ``BK_zkEnableSecurity`` / ``BK_zkDigestAuthFile`` over the file ``PYBK_CLIENT_CONF``."""
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
            if sep and key.strip() in ("zkEnableSecurity", "zkDigestAuthFile"):
                values[key.strip()] = value.strip()
    for key in ("zkEnableSecurity", "zkDigestAuthFile"):
        if f"BK_{key}" in environ:
            values[key] = environ[f"BK_{key}"]
    return zk_security_from_settings(values)
