"""What bookie and client agree on for transport security and authentication, on every listener.

* gRPC: TLS from the channel's credentials; a token rides in the ``authorization`` metadata of
  each call as ``Bearer <token>`` (gRPC's call credentials, which only go over a secure channel).
* Add port: TLS wraps the socket from the first byte (there is no plaintext upgrade, so a
  plaintext client fails the handshake instead of sending anything). A client with a token sends
  :data:`AUTH_PREFACE` and one frame holding the token instead of the plain preface.
* HTTP admin: TLS as above; a token in the ``Authorization: Bearer <token>`` header.

An identity from a client certificate is its subject's common name (BookKeeper's
``getProtocolPrincipals`` carries the whole certificate; the name is what rights are given to).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOKEN_METADATA_KEY = "authorization"  # gRPC metadata keys are lower case
BEARER = "Bearer "
# The add port's preface for a client that authenticates with a token: the token follows in one
# frame (``bkproto.add_port.frame``), then the AddEntriesRequest frames as usual.
AUTH_PREFACE = b"PYBKADD\x02"
READ_AUTH_PREFACE = b"PYBKRDS\x02"  # the same for a ReadStream connection (``bkproto.add_port``)
MAX_TOKEN_BYTES = 4096


def bearer(token: str) -> str:
    return BEARER + token


def token_from_header(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, or None."""
    if value is None or not value.startswith(BEARER):
        return None
    return value[len(BEARER) :].strip() or None


def common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The subject CN of a certificate as ``SSLSocket.getpeercert()`` gives it (a verified one)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def server_ssl_context(
    cert: Path, key: Path, trust: Path | None, require_client_cert: bool
) -> ssl.SSLContext:
    """An SSL context for a TLS listener: our certificate chain and key, and with
    ``require_client_cert`` the CA bundle client certificates must chain to."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # as gRPC's floor
    context.load_cert_chain(cert, key)
    if require_client_cert:
        if trust is None:
            raise ValueError("client certificates need a CA bundle to verify them against")
        context.load_verify_locations(cafile=str(trust))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_ssl_context(
    trust: Path, cert: Path | None = None, key: Path | None = None, check_hostname: bool = True
) -> ssl.SSLContext:
    """An SSL context for connecting to a bookie: it verifies the bookie's certificate against
    ``trust`` (and its name with ``check_hostname``) and, for mutual TLS, presents ours."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cafile=str(trust))
    context.check_hostname = check_hostname
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context
