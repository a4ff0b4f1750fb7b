"""Transport security, authentication and authorization of a bookie, for all three listeners.

TLS (``tlsCertificatePath``, ``tlsKeyStore``, ``tlsTrustStore``, ``tlsClientAuthentication``,
BookKeeper's keys, PEM files only) covers gRPC, the add port and HTTP alike. With
``tlsCertFilesRefreshDurationSeconds`` > 0 renewed files are picked up without a restart: gRPC
asks before every handshake (a cheap mtime check at most that often), the add port and HTTP swap
in a fresh SSL context from the TLS ``sni_callback``, which runs during each handshake.

Authentication (``bookieAuthProviderFactoryClass``, BookKeeper's key, here a list of built-in
provider names): ``mtls`` takes the identity from the client certificate's common name, ``token``
from a bearer token listed in ``bookieAuthTokenFile`` (``identity=token`` lines, or
``identity=sha256:<hex>`` with only the token's hash). With any
provider configured, every Bookie request on every listener must come with an identity, or it
is refused with EUA and counted in ``bookkeeper_server_auth_refused``. gRPC health and reflection
stay open: they say whether the bookie serves and what its API is, nothing of its data.

Authorization: each identity has rights among read, write, fence and admin, from
``bookieAuthorizationFile`` (``identity=read,write`` lines, ``*`` for every authenticated
identity, ``all`` for the four). Without the file an authenticated identity may read, write and
fence, and none may administer. A fence by an identity without the write right is refused on a
ledger the bookie does not hold: fencing creates the ledger's state, and an identity that may not
write must not reserve ledger ids by fencing them before their writer arrives.

Without a provider nothing is checked: the master key (derived from the ledger's password)
guards adds, fences and LAC writes per ledger, reads are open to anyone who reaches the port, and
the HTTP admin port binds to 127.0.0.1 unless ``httpServerHost`` says otherwise.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from prometheus_client import CollectorRegistry, Counter

from bkproto import security as wire
from bkproto.v1 import bookie_pb2
from bookie.api import BookieCore
from bookie.errors import BookieError
from bookie.handlers.add_message import DecodedAddEntries, add_ids, decoded

log = logging.getLogger(__name__)

PROVIDERS = ("mtls", "token")
HASHED_TOKEN_PREFIX = "sha256:"


class Right(enum.Enum):
    READ = "read"
    WRITE = "write"
    FENCE = "fence"  # fence (and so recover) a ledger
    ADMIN = "admin"  # the HTTP admin port's state-changing calls


ALL_RIGHTS = frozenset(Right)
DEFAULT_RIGHTS = frozenset({Right.READ, Right.WRITE, Right.FENCE})


@dataclass(frozen=True)
class Identity:
    name: str
    method: str  # "mtls", "token", or "none" when authentication is off


ANONYMOUS = Identity("anonymous", "none")


@dataclass(frozen=True)
class TlsSettings:
    cert_path: Path  # tlsCertificatePath: PEM chain
    key_path: Path  # tlsKeyStore with tlsKeyStoreType=PEM: the key file
    trust_path: Path | None = None  # tlsTrustStore: CA bundle for client certificates
    client_auth: bool = False  # tlsClientAuthentication
    refresh_s: float = 0.0  # tlsCertFilesRefreshDurationSeconds; 0: never reload

    def __post_init__(self) -> None:
        if self.client_auth and self.trust_path is None:
            raise ValueError(
                "tlsClientAuthentication needs tlsTrustStore (the CA bundle of client certificates)"
            )


@dataclass(frozen=True)
class AuthSettings:
    providers: tuple[str, ...] = ()  # empty: authentication off
    token_file: Path | None = None  # bookieAuthTokenFile
    rights_file: Path | None = None  # bookieAuthorizationFile


@dataclass(frozen=True)
class SecuritySettings:
    tls: TlsSettings | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)


def read_tokens(path: Path) -> dict[bytes, str]:
    """``sha256(token) -> identity`` from ``identity=token`` lines, or ``identity=sha256:<hex>``
    lines that hold only the token's SHA-256 (so the file gives no token away). Tokens are kept
    hashed: a lookup by digest leaks nothing of a token through its timing."""
    tokens: dict[bytes, str] = {}
    for number, line in _lines(path):
        name, sep, token = line.partition("=")
        token = token.strip()
        if not sep or not name.strip() or not token:
            raise ValueError(f"{path}:{number}: expected identity=token or identity=sha256:<hex>")
        if token.startswith(HASHED_TOKEN_PREFIX):
            try:
                digest = bytes.fromhex(token[len(HASHED_TOKEN_PREFIX) :])
            except ValueError:
                digest = b""
            if len(digest) != hashlib.sha256().digest_size:
                raise ValueError(f"{path}:{number}: sha256: must be followed by 64 hex digits")
        else:
            digest = hashlib.sha256(token.encode()).digest()
        tokens[digest] = name.strip()
    return tokens


def read_rights(path: Path) -> dict[str, frozenset[Right]]:
    """``identity -> rights`` from ``identity=right[,right]`` lines (``*``: any identity)."""
    rights: dict[str, frozenset[Right]] = {}
    for number, line in _lines(path):
        name, sep, listed = line.partition("=")
        names = {part.strip().lower() for part in listed.split(",") if part.strip()}
        if not sep or not name.strip():
            raise ValueError(f"{path}:{number}: expected identity=right[,right]")
        try:
            granted = ALL_RIGHTS if "all" in names else frozenset(Right(n) for n in names)
        except ValueError:
            raise ValueError(
                f"{path}:{number}: rights are read, write, fence, admin or all; got {listed.strip()!r}"
            ) from None
        rights[name.strip()] = granted
    return rights


def _lines(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.strip().startswith("#")]


class _ChangedFiles:
    """Whether any of some files changed since the last look, looking at most every ``every_s``."""

    def __init__(self, paths: tuple[Path, ...], every_s: float) -> None:
        self._paths = paths
        self._every_s = every_s
        self._next = time.monotonic() + every_s
        self._stamps = self._read()
        self._lock = threading.Lock()  # HTTP threads and the event loop both ask

    def _read(self) -> tuple[float, ...]:
        try:
            return tuple(p.stat().st_mtime for p in self._paths)
        except OSError:
            return ()

    def changed(self) -> bool:
        if self._every_s <= 0 or time.monotonic() < self._next:
            return False
        with self._lock:
            self._next = time.monotonic() + self._every_s
            stamps = self._read()
            if not stamps or stamps == self._stamps:
                return False
            self._stamps = stamps
            return True


class ServerTls:
    """The bookie's TLS material: gRPC credentials and SSL contexts that follow renewed files."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        paths: tuple[Path, ...] = (settings.cert_path, settings.key_path)
        if settings.trust_path is not None:
            paths += (settings.trust_path,)
        self._grpc_changes = _ChangedFiles(paths, settings.refresh_s)
        self._ssl_changes = _ChangedFiles(paths, settings.refresh_s)
        self._current = self._new_context()  # raises on unreadable or mismatched files

    def _new_context(self) -> ssl.SSLContext:
        s = self.settings
        return wire.server_ssl_context(s.cert_path, s.key_path, s.trust_path, s.client_auth)

    def _grpc_configuration(self) -> Any:
        s = self.settings
        trust = s.trust_path.read_bytes() if s.trust_path is not None else None
        return grpc.ssl_server_certificate_configuration(
            [(s.key_path.read_bytes(), s.cert_path.read_bytes())], root_certificates=trust
        )

    def grpc_credentials(self) -> grpc.ServerCredentials:
        def fetch() -> Any:
            if not self._grpc_changes.changed():
                return None
            try:
                configuration = self._grpc_configuration()
            except OSError as exc:  # a renewal caught half-written: keep the old files
                log.warning("cannot reload the TLS files for gRPC: %s", exc)
                return None
            log.info("gRPC: reloaded renewed TLS files")
            return configuration

        return grpc.dynamic_ssl_server_credentials(
            self._grpc_configuration(), fetch, require_client_authentication=self.settings.client_auth
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A context for the add port and HTTP; each handshake gets the newest files' context."""
        front = self._new_context()

        def pick(sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
            if self._ssl_changes.changed():
                try:
                    self._current = self._new_context()
                    log.info("add port/HTTP: reloaded renewed TLS files")
                except (OSError, ssl.SSLError) as exc:
                    log.warning("cannot reload the TLS files: %s", exc)
            sock.context = self._current

        front.sni_callback = pick
        return front


class Guard:
    """Who is calling and what they may do, for every listener; counts refusals."""

    def __init__(self, settings: AuthSettings, registry: CollectorRegistry | None) -> None:
        self.required = bool(settings.providers)
        self._mtls = "mtls" in settings.providers
        self._tokens = read_tokens(settings.token_file) if settings.token_file is not None else {}
        self._rights = read_rights(settings.rights_file) if settings.rights_file is not None else {}
        self._default = self._rights.pop("*", DEFAULT_RIGHTS)
        self.refused = Counter(
            "bookkeeper_server_auth_refused", "Requests refused with EUA: no identity, or not allowed",
            ["listener", "reason"], registry=registry,
        )

    def identify(self, cert_name: str | None, token: str | None) -> Identity | None:
        """The caller's identity; None when authentication is on and neither proves one."""
        if not self.required:
            return ANONYMOUS
        if token is not None and self._tokens:
            name = self._tokens.get(hashlib.sha256(token.encode()).digest())
            if name is not None:
                return Identity(name, "token")
        if self._mtls and cert_name is not None:
            return Identity(cert_name, "mtls")
        return None

    def rights(self, identity: Identity) -> frozenset[Right]:
        if not self.required:
            return ALL_RIGHTS
        return self._rights.get(identity.name, self._default)

    def refusal(self, listener: str, identity: Identity | None, right: Right) -> str | None:
        """Why the call must be refused (counted), or None when it may go on."""
        if identity is None:
            self.refused.labels(listener, "unauthenticated").inc()
            return "authentication required"
        if right not in self.rights(identity):
            self.refused.labels(listener, "unauthorized").inc()
            return f"{identity.name} lacks the {right.value} right"
        return None


# ---- gRPC ----------------------------------------------------------------------------------

_WRITES = frozenset({"AddEntries", "AddEntry", "WriteLac", "ForceLedger"})
Context = grpc.aio.ServicerContext[Any, Any]


def grpc_identity(guard: Guard, context: Context) -> Identity | None:
    auth = context.auth_context()
    names = list(auth.get("x509_common_name") or ())
    cert_name = names[0].decode() if names else None
    token = None
    for key, value in context.invocation_metadata() or ():
        if key == wire.TOKEN_METADATA_KEY and isinstance(value, str):
            token = wire.token_from_header(value)
    return guard.identify(cert_name, token)


class GrpcGuard:
    """Wraps the Bookie service's methods: each call proves an identity with the needed right,
    or ends with UNAUTHENTICATED / PERMISSION_DENIED and details starting with ``EUA``."""

    def __init__(self, guard: Guard, core: BookieCore) -> None:
        self.guard = guard
        self.core = core

    def early_refusal(self, context: Context) -> str | None:
        """Why a call without any identity is refused before its request is read (counted)."""
        if self.guard.required and grpc_identity(self.guard, context) is None:
            return self.guard.refusal("grpc", None, Right.READ)
        return None

    async def _check(self, context: Context, identity: Identity | None, right: Right) -> None:
        why = self.guard.refusal("grpc", identity, right)
        if why is not None:
            code = grpc.StatusCode.UNAUTHENTICATED if identity is None else grpc.StatusCode.PERMISSION_DENIED
            await context.abort(code, f"EUA: {why}")

    async def _check_fence(self, context: Context, identity: Identity | None, ledger_id: int) -> None:
        await self._check(context, identity, Right.FENCE)
        if identity is not None and Right.WRITE not in self.guard.rights(identity):
            try:
                await self.core.read_lac(ledger_id)
            except BookieError as exc:
                if exc.status == bookie_pb2.ENOLEDGER:
                    self.guard.refused.labels("grpc", "unauthorized").inc()
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"EUA: {identity.name} may not write, so may not fence ledger {ledger_id}"
                        " that this bookie does not hold",
                    )

    def wrap(self, name: str, behaviour: Callable[..., Any], streaming_request: bool) -> Callable[..., Any]:
        right = Right.WRITE if name in _WRITES else Right.READ
        if name == "ReadStream":
            return self._read_stream(behaviour)
        if streaming_request:  # AddEntries

            async def stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
                await self._check(context, grpc_identity(self.guard, context), right)
                async for response in behaviour(requests, context):
                    yield response

            return stream

        async def unary(request: Any, context: Context) -> Any:
            identity = grpc_identity(self.guard, context)
            if name == "ReadEntry" and request.flags & bookie_pb2.FENCE_LEDGER:
                await self._check_fence(context, identity, request.ledger_id)
            else:
                await self._check(context, identity, right)
            return await behaviour(request, context)

        return unary

    def _read_stream(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            identity = grpc_identity(self.guard, context)
            await self._check(context, identity, Right.READ)

            async def checked() -> AsyncIterator[Any]:
                async for request in requests:
                    if request.HasField("read") and request.read.flags & bookie_pb2.FENCE_LEDGER:
                        await self._check_fence(context, identity, request.read.ledger_id)
                    yield request

            async for response in behaviour(checked(), context):
                yield response

        return stream


def refused_add_response(
    request: bookie_pb2.AddEntriesRequest | DecodedAddEntries, why: str
) -> bookie_pb2.AddEntriesResponse:
    """EUA for every add of a message, per-add and packed, in answer order (the add port's answer
    to a caller it refuses)."""
    adds = request.adds if isinstance(request, DecodedAddEntries) else decoded(request).adds
    return bookie_pb2.AddEntriesResponse(results=[
        bookie_pb2.AddResponse(status=bookie_pb2.EUA, ledger_id=ledger_id, entry_id=entry_id, message=why)
        for ledger_id, entry_id in add_ids(adds)
    ])


def settings_from(values: Mapping[str, Any]) -> SecuritySettings:
    """The security settings from typed config values by BookKeeper key (see ``bookie.config``)."""
    tls = None
    if "tlsCertificatePath" in values or "tlsKeyStore" in values:
        for key in ("tlsKeyStoreType", "tlsTrustStoreType"):
            if values.get(key, "PEM").upper() != "PEM":
                raise ValueError(f"{key}={values[key]}: only PEM files are supported")
        if "tlsCertificatePath" not in values or "tlsKeyStore" not in values:
            raise ValueError("TLS needs both tlsCertificatePath (PEM chain) and tlsKeyStore (PEM key)")
        trust = values.get("tlsTrustStore")
        tls = TlsSettings(
            Path(values["tlsCertificatePath"]), Path(values["tlsKeyStore"]),
            Path(trust) if trust else None, values.get("tlsClientAuthentication", False),
            float(values.get("tlsCertFilesRefreshDurationSeconds", 0)),
        )
    providers = tuple(values.get("bookieAuthProviderFactoryClass", ()))
    unknown = [p for p in providers if p not in PROVIDERS]
    if unknown:
        raise ValueError(
            f"bookieAuthProviderFactoryClass: unknown provider {unknown[0]!r} (have mtls, token)"
        )
    if providers and tls is None:
        raise ValueError("authentication (bookieAuthProviderFactoryClass) needs TLS: credentials must not"
                         " cross the network in clear")
    if "mtls" in providers and tls is not None and not tls.client_auth:
        raise ValueError("the mtls provider needs tlsClientAuthentication=true")
    if "token" in providers and "bookieAuthTokenFile" not in values:
        raise ValueError("the token provider needs bookieAuthTokenFile")
    token_file, rights_file = values.get("bookieAuthTokenFile"), values.get("bookieAuthorizationFile")
    auth = AuthSettings(providers, Path(token_file) if token_file else None,
                        Path(rights_file) if rights_file else None)
    return SecuritySettings(tls, auth)


class BookieSecurity:
    """What the listeners of one bookie need: its TLS material (None: plaintext) and its guard."""

    def __init__(self, settings: SecuritySettings, registry: CollectorRegistry | None = None) -> None:
        self.tls = ServerTls(settings.tls) if settings.tls is not None else None
        self.guard = Guard(settings.auth, registry)
        self.ssl_context = self.tls.ssl_context() if self.tls is not None else None
