"""The client's side of transport security and authentication (what goes on the wire:
``bkproto.security``).

Keys are BookKeeper's client ones, each falling back to the bookie's as BookKeeper's do:
``clientTrustStore`` / ``tlsTrustStore`` (PEM CA bundle; set, TLS is on), ``clientKeyStore`` /
``tlsKeyStore`` (PEM key) and ``clientCertificatePath`` / ``tlsCertificatePath`` (PEM chain) for
mutual TLS, ``tlsHostnameVerificationEnabled`` (the add port's name check; gRPC always checks
that the bookie's certificate names the address it is reached at). A token for the bookies'
token provider comes from the file ``clientAuthTokenFile`` or the ``BK_clientAuthToken``
environment variable, never from a command line, where ``ps`` would show it.

:func:`security_from_environ` reads them from ``BK_<key>`` environment variables over the
properties file named by ``PYBK_CLIENT_CONF``: every pybk tool (shell, bench, autorecovery) and
:meth:`BookKeeper.connect` without explicit settings use it.
"""

from __future__ import annotations

import functools
import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bkproto import security as wire
from bkproto.errors import IncorrectParameterError

CONF_ENV = "PYBK_CLIENT_CONF"
ENV_PREFIX = "BK_"
KEYS = (
    "clientTrustStore", "tlsTrustStore", "clientKeyStore", "tlsKeyStore", "clientCertificatePath",
    "tlsCertificatePath", "tlsHostnameVerificationEnabled", "clientAuthTokenFile", "clientAuthToken",
    "clientKeyStoreType", "clientTrustStoreType", "tlsKeyStoreType", "tlsTrustStoreType",
)  # fmt: skip


@dataclass(frozen=True)
class ClientSecurity:
    """How this client reaches bookies: TLS (with ``trust_path``) and who it says it is (its
    certificate and/or ``token``)."""

    trust_path: Path | None = None
    cert_path: Path | None = None
    key_path: Path | None = None
    check_hostname: bool = True
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.cert_path is None) != (self.key_path is None):
            raise IncorrectParameterError("a client certificate needs its key and the key its certificate")
        if self.cert_path is not None and self.trust_path is None:
            raise IncorrectParameterError("a client certificate needs TLS: set clientTrustStore as well")
        if self.token is not None and self.trust_path is None:
            raise IncorrectParameterError("a token must not cross the network in clear: set clientTrustStore")

    @property
    def tls(self) -> bool:
        return self.trust_path is not None

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials: TLS with our certificate if any, and the token on every call."""
        assert self.trust_path is not None
        channel = grpc.ssl_channel_credentials(
            root_certificates=self.trust_path.read_bytes(),
            private_key=self.key_path.read_bytes() if self.key_path is not None else None,
            certificate_chain=self.cert_path.read_bytes() if self.cert_path is not None else None,
        )
        if self.token is None:
            return channel
        metadata = ((wire.TOKEN_METADATA_KEY, wire.bearer(self.token)),)

        class _Token(grpc.AuthMetadataPlugin):
            def __call__(self, context: Any, callback: Any) -> None:
                callback(metadata, None)

        return grpc.composite_channel_credentials(channel, grpc.metadata_call_credentials(_Token()))

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """The add port's SSL context (made once: contexts are costly and shareable)."""
        assert self.trust_path is not None
        return wire.client_ssl_context(self.trust_path, self.cert_path, self.key_path, self.check_hostname)


def security_from_settings(values: Mapping[str, str]) -> ClientSecurity | None:
    """Client security from BookKeeper key names; None when nothing is set (plaintext)."""

    def first(*keys: str) -> str | None:
        return next((values[k] for k in keys if values.get(k)), None)

    for type_key in ("clientKeyStoreType", "clientTrustStoreType", "tlsKeyStoreType", "tlsTrustStoreType"):
        if values.get(type_key, "PEM").upper() != "PEM":
            raise IncorrectParameterError(f"{type_key}={values[type_key]}: only PEM files are supported")
    trust = first("clientTrustStore", "tlsTrustStore")
    cert = first("clientCertificatePath", "tlsCertificatePath")
    key = first("clientKeyStore", "tlsKeyStore")
    token: str | None = values.get("clientAuthToken") or None
    token_file = values.get("clientAuthTokenFile")
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise IncorrectParameterError(f"cannot read clientAuthTokenFile {token_file}: {exc}") from exc
    if trust is None and cert is None and key is None and token is None:
        return None
    verify = values.get("tlsHostnameVerificationEnabled", "true").lower() != "false"
    return ClientSecurity(
        Path(trust) if trust else None, Path(cert) if cert else None, Path(key) if key else None,
        verify, token,
    )


def security_from_environ(environ: Mapping[str, str] | None = None) -> ClientSecurity | None:
    """Client security from ``BK_<key>`` variables over the file named by ``PYBK_CLIENT_CONF``."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    conf = environ.get(CONF_ENV)
    if conf:
        values.update(read_properties(Path(conf)))
    for key in KEYS:
        if ENV_PREFIX + key in environ:
            values[key] = environ[ENV_PREFIX + key]
    return security_from_settings(values)


def read_properties(path: Path) -> dict[str, str]:
    """``key=value`` lines (``#`` comments) of a client configuration file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise IncorrectParameterError(f"cannot read the client configuration {path}: {exc}") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith(("#", "!")):
            values[key.strip()] = value.strip()
    return values


def admin_get(host: str, port: int, path: str, security: ClientSecurity | None, timeout_s: float) -> bytes:
    """GET ``path`` from a bookie's HTTP admin port: over HTTPS with our certificate and token
    when ``security`` has TLS (as the bookie's listeners do then), plain HTTP otherwise.
    Raises OSError (``urllib.error.URLError``/``HTTPError``) as ``urlopen`` does."""
    tls = security is not None and security.tls
    request = urllib.request.Request(f"{'https' if tls else 'http'}://{host}:{port}{path}")
    if security is not None and security.token is not None:
        request.add_header("Authorization", wire.bearer(security.token))
    context = security.ssl_context if security is not None and tls else None
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as reply:
        return bytes(reply.read())
