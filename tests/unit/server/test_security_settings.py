"""Security configuration and decisions without a network: the keys, the token and rights files,
who is who and who may do what; the client's and ZooKeeper's settings from their keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bkclient.tls import security_from_environ, security_from_settings
from bkmeta.zk_security import ZkSecurity, zk_security_from_environ, zk_security_from_settings
from bkproto import security as wire
from bkproto.errors import IncorrectParameterError
from bookie.config import ConfigError, load_config
from bookie.security import (
    ALL_RIGHTS,
    ANONYMOUS,
    AuthSettings,
    Guard,
    Identity,
    Right,
    read_rights,
    read_tokens,
)


def conf(tmp_path: Path, **keys: str) -> dict[str, str]:
    return {"journalDirectories": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l"), **keys}


def files(tmp_path: Path) -> dict[str, str]:
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("x")
    return {"tlsCertificatePath": str(tmp_path / "cert.pem"), "tlsKeyStore": str(tmp_path / "key.pem"),
            "tlsTrustStore": str(tmp_path / "ca.pem")}


def test_tls_and_auth_keys_are_read_with_bookkeeper_names(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice=t1\n")
    config = load_config(overrides=conf(
        tmp_path, **files(tmp_path), tlsClientAuthentication="true", tlsKeyStoreType="PEM",
        tlsCertFilesRefreshDurationSeconds="30", bookieAuthProviderFactoryClass="mtls, token",
        bookieAuthTokenFile=str(tokens), httpServerHost="0.0.0.0",
    ))
    tls = config.security.tls
    assert tls is not None
    assert (tls.cert_path, tls.client_auth, tls.refresh_s) == (tmp_path / "cert.pem", True, 30.0)
    assert config.security.auth.providers == ("mtls", "token")
    assert config.http_address == "0.0.0.0"
    assert load_config(overrides=conf(tmp_path)).http_address == "127.0.0.1"  # not BookKeeper's 0.0.0.0


@pytest.mark.parametrize(("keys", "complaint"), [
    ({"tlsKeyStoreType": "JKS"}, "only PEM"),
    ({"bookieAuthProviderFactoryClass": "token"}, "needs TLS"),
    ({"bookieAuthProviderFactoryClass": "sasl", "TLS": "yes"}, "unknown provider"),
    ({"bookieAuthProviderFactoryClass": "mtls", "TLS": "yes"}, "tlsClientAuthentication=true"),
    ({"bookieAuthProviderFactoryClass": "token", "TLS": "yes"}, "bookieAuthTokenFile"),
    ({"tlsClientAuthentication": "true", "TLS": "no trust"}, "tlsTrustStore"),
    ({"zkEnableSecurity": "true"}, "zkDigestAuthFile"),
])
def test_inconsistent_security_settings_are_refused(
    tmp_path: Path, keys: dict[str, str], complaint: str
) -> None:
    keys = dict(keys)
    tls = keys.pop("TLS", None)
    if tls is not None:
        keys.update(files(tmp_path))
        if tls == "no trust":
            del keys["tlsTrustStore"]
    with pytest.raises(ConfigError, match=complaint):
        load_config(overrides=conf(tmp_path, **keys))


def test_tokens_and_rights_files(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nalice = secret=with=equals\nbob=other\n")
    assert sorted(read_tokens(tokens).values()) == ["alice", "bob"]
    rights = tmp_path / "rights"
    rights.write_text("alice=read, write\nroot=all\n*=read\n")
    assert read_rights(rights) == {"alice": {Right.READ, Right.WRITE}, "root": ALL_RIGHTS, "*": {Right.READ}}
    rights.write_text("alice=read,delete\n")
    with pytest.raises(ValueError, match="rights are read, write"):
        read_rights(rights)
    tokens.write_text("no-equals-sign\n")
    with pytest.raises(ValueError, match="identity=token"):
        read_tokens(tokens)
    hashed = hashlib.sha256(b"carol-token").hexdigest()
    tokens.write_text(f"carol=sha256:{hashed}\n")  # the file need not hold the token itself
    guard = Guard(AuthSettings(("token",), tokens), None)
    assert guard.identify(None, "carol-token") == Identity("carol", "token")
    assert guard.identify(None, f"sha256:{hashed}") is None
    tokens.write_text("carol=sha256:abc\n")
    with pytest.raises(ValueError, match="64 hex digits"):
        read_tokens(tokens)


def test_guard_identifies_by_token_or_certificate_and_applies_rights(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice=alice-token\n")
    rights = tmp_path / "rights"
    rights.write_text("alice=read\nroot=all\n")
    guard = Guard(AuthSettings(("mtls", "token"), tokens, rights), CollectorRegistry())
    assert guard.identify(None, "alice-token").name == "alice"  # type: ignore[union-attr]
    assert guard.identify("root", None).name == "root"  # type: ignore[union-attr]
    assert guard.identify(None, "wrong") is None
    assert guard.identify(None, None) is None
    alice, root = guard.identify(None, "alice-token"), guard.identify("root", None)
    carol = guard.identify("carol", None)
    assert guard.refusal("grpc", alice, Right.READ) is None
    assert guard.refusal("grpc", alice, Right.WRITE) == "alice lacks the write right"
    assert guard.refusal("http", root, Right.ADMIN) is None
    # an identity not listed gets the default: read, write, fence, never admin
    assert guard.refusal("grpc", carol, Right.FENCE) is None
    assert guard.refusal("http", carol, Right.ADMIN) is not None
    assert guard.refusal("add", None, Right.WRITE) == "authentication required"
    assert guard.refused.labels("add", "unauthenticated")._value.get() == 1

    open_guard = Guard(AuthSettings(), None)  # authentication off: everyone may do everything
    assert open_guard.identify(None, None) is ANONYMOUS
    assert open_guard.refusal("http", ANONYMOUS, Right.ADMIN) is None


def test_client_security_from_keys_and_environment(tmp_path: Path) -> None:
    assert security_from_settings({}) is None
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    conf_file = tmp_path / "client.conf"
    conf_file.write_text(f"tlsTrustStore={tmp_path / 'ca.pem'}\nclientAuthTokenFile={token_file}\n")
    environ = {"PYBK_CLIENT_CONF": str(conf_file), "BK_clientTrustStore": "/other/ca.pem"}
    security = security_from_environ(environ)
    assert security is not None
    assert (security.trust_path, security.token, security.check_hostname) == (
        Path("/other/ca.pem"), "tok", True
    )
    assert "tok" not in repr(security)
    with pytest.raises(IncorrectParameterError, match="in clear"):
        security_from_settings({"clientAuthToken": "tok"})
    with pytest.raises(IncorrectParameterError, match="its key"):
        security_from_settings({"clientTrustStore": "ca", "clientCertificatePath": "c.pem"})


def test_zookeeper_identity_from_a_file_never_shown(tmp_path: Path) -> None:
    digest = tmp_path / "digest"
    digest.write_text("cluster:pw:with:colons\n")
    security = ZkSecurity.from_file(digest)
    assert security.auth_data == [("digest", "cluster:pw:with:colons")]
    assert "pw" not in repr(security)
    assert security.kazoo_options()["default_acl"] == security.acl
    assert "default_acl" not in zk_security_from_settings({"zkDigestAuthFile": str(digest)}).kazoo_options()  # type: ignore[union-attr]
    assert zk_security_from_environ({}) is None
    from_env = zk_security_from_environ({"BK_zkEnableSecurity": "true", "BK_zkDigestAuthFile": str(digest)})
    assert from_env is not None and from_env.enable_acls
    digest.write_text("no-password\n")
    with pytest.raises(IncorrectParameterError, match="user:password"):
        ZkSecurity.from_file(digest)


def test_wire_helpers() -> None:
    assert wire.token_from_header("Bearer abc") == "abc"
    assert wire.token_from_header("Basic abc") is None
    assert wire.token_from_header(None) is None
    subject = ((("organizationName", "x"),), (("commonName", "alice"),))
    assert wire.common_name({"subject": subject}) == "alice"
    assert wire.common_name(None) is None
