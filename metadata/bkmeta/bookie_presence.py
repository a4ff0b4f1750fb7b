"""`BookiePresence`: everything a bookie daemon does in ZooKeeper, behind ``start()``/``close()``.

``start()`` connects (the cluster must exist), checks the bookie's cookie against its directories
(refusing to start on a mismatch, see :mod:`bkmeta.cookie`) and registers the bookie's ephemeral
znode, which is re-created after every session expiry. ``set_read_only`` moves it under
``available/readonly``. The daemon adapts its own config to these plain arguments (bkmeta never
imports the bookie package).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bkmeta.cookie import Cookie, verify_or_create_cookie
from bkmeta.metadata_client import MetadataClient
from bkmeta.registration import BookieRegistration, BookieServiceInfo
from bkmeta.store import MetadataStore
from bkmeta.zk_security import ZkSecurity
from bkproto.errors import MetadataStoreError, NoSuchLedgerError

log = logging.getLogger(__name__)


class BookieConfigLike(Protocol):
    """The attributes of the bookie daemon's config that registration needs (duck-typed: bkmeta
    must not import the bookie package)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def advertised_address(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def http_enabled(self) -> bool: ...

    @property
    def rack(self) -> str: ...

    @property
    def http_port(self) -> int: ...

    @property
    def zk_servers(self) -> str | None: ...

    @property
    def zk_timeout_ms(self) -> int: ...

    @property
    def journal_dirs(self) -> tuple[Path, ...]: ...

    @property
    def ledger_dirs(self) -> tuple[Path, ...]: ...

    @property
    def zk_enable_security(self) -> bool: ...

    @property
    def tls_enabled(self) -> bool: ...

    @property
    def zk_digest_file(self) -> Path | None: ...

    @property
    def zk_tls_trust(self) -> Path | None: ...

    @property
    def zk_tls_cert(self) -> Path | None: ...

    @property
    def zk_tls_key(self) -> Path | None: ...


class BookiePresence:
    def __init__(
        self,
        zk_servers: str,
        info: BookieServiceInfo,
        journal_dirs: Sequence[str | Path],
        ledger_dirs: Sequence[str | Path],
        *,
        ledgers_root: str = "/ledgers",
        session_timeout_s: float = 10.0,
        read_only: bool = False,
        store: MetadataStore | None = None,
        zk_security: ZkSecurity | None = None,
    ) -> None:
        """``store``: a metadata session to use instead of connecting to ``zk_servers`` (the
        simulation's in-memory ZooKeeper); ``start()`` takes it over."""
        self._zk_servers = zk_servers
        self._zk_security = zk_security
        self._info = info
        self._journal_dirs = list(journal_dirs)
        self._ledger_dirs = list(ledger_dirs)
        self._ledgers_root = ledgers_root
        self._session_timeout_s = session_timeout_s
        self._read_only = read_only
        self._store = store
        self._meta: MetadataClient | None = None
        self._registration: BookieRegistration | None = None
        self.cookie: Cookie | None = None

    @classmethod
    def from_bookie_config(cls, config: BookieConfigLike) -> BookiePresence:
        """Build from a started bookie's config (``bookie.main.registration_factory`` fits this).
        An HTTP port of 0 (any) is not advertised: the bound port is not in the config."""
        if config.zk_servers is None:
            raise ValueError("bookie config has no zkServers")
        http = config.http_enabled and config.http_port > 0
        info = BookieServiceInfo(
            config.bookie_id,
            config.advertised_address,
            config.port,
            config.advertised_address if http else None,
            config.http_port if http else None,
            rack=config.rack,
            tls=config.tls_enabled,
        )
        return cls(
            config.zk_servers,
            info,
            config.journal_dirs,
            config.ledger_dirs,
            session_timeout_s=config.zk_timeout_ms / 1000.0,
            zk_security=zk_security_of(config),
        )

    @property
    def metadata(self) -> MetadataClient:
        if self._meta is None:
            raise RuntimeError("BookiePresence not started")
        return self._meta

    async def start(self) -> None:
        """Connect and verify (or create) the cookie. Runs before the bookie opens its storage,
        so a replaced disk is refused before anything is replayed into it. On failure nothing
        stays open."""
        if self._store is not None:
            meta = await MetadataClient.over(self._store, self._ledgers_root, watch_bookies=False)
        else:
            meta = await MetadataClient.connect(
                self._zk_servers,
                self._ledgers_root,
                watch_bookies=False,
                session_timeout_s=self._session_timeout_s,
                security=self._zk_security,
            )
        try:
            self.cookie = await verify_or_create_cookie(
                meta.zk,
                self._info.bookie_id,
                self._journal_dirs,
                self._ledger_dirs,
                meta.instance_id,
                meta.layout,
            )
        except BaseException:
            await meta.close()
            raise
        self._meta = meta

    async def register(self, http_port: int | None = None, add_port: int | None = None) -> None:
        """Register the bookie's ephemeral znode (re-created after every session expiry).
        ``http_port`` and ``add_port`` are the bound admin and add ports, advertised in the
        service info."""
        meta = self.metadata
        if http_port is not None:
            self._info = dataclasses.replace(
                self._info, http_host=self._info.grpc_host, http_port=http_port
            )
        if add_port is not None:
            # every add port of this bookie's code serves the ReadStream too
            self._info = dataclasses.replace(self._info, add_port=add_port, add_port_reads=True)
        registration = meta.bookie_registration(self._info)
        await registration.register(read_only=self._read_only)
        self._registration = registration

    # ---- the metadata's ledgers, for the bookie's garbage collection (bookie.gc.LedgerLister) --

    async def ledger_ids(self) -> set[int]:
        """Every ledger with metadata; raises if ZooKeeper cannot answer the whole walk. The
        server is synced first: one lagging behind the client that created a ledger must not
        make a live ledger look deleted."""
        meta = self.metadata
        root = meta.layout.root
        await meta.zk.sync(root)
        if await meta.zk.exists(root) is None:
            raise MetadataStoreError(f"the ledgers root {root} is gone; no ledger can be listed")
        return set(await meta.ledger_manager.list_ledgers())

    async def ledger_exists(self, ledger_id: int) -> bool:
        try:
            await self.metadata.ledger_manager.read_ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return False
        return True

    async def ledger_is_open(self, ledger_id: int) -> bool | None:
        """Whether the ledger is still open (being written), None when it has no metadata
        (``gcexplain`` names the open ledgers that pin an entry log)."""
        try:
            versioned = await self.metadata.ledger_manager.read_ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return None
        return not versioned.value.is_closed

    async def set_read_only(self, read_only: bool) -> None:
        self._read_only = read_only
        if self._registration is not None:
            await self._registration.set_read_only(read_only)

    async def close(self) -> None:
        registration, self._registration = self._registration, None
        meta, self._meta = self._meta, None
        if registration is not None:
            await registration.close()
        if meta is not None:
            await meta.close()


def zk_security_of(config: BookieConfigLike) -> ZkSecurity | None:
    """The bookie's ZooKeeper identity from its own configuration (never the environment's
    client settings: a bookie is configured in one place)."""
    tls = {"tls_trust": config.zk_tls_trust, "tls_cert": config.zk_tls_cert, "tls_key": config.zk_tls_key}
    if config.zk_digest_file is not None:
        return ZkSecurity.from_file(config.zk_digest_file, config.zk_enable_security, **tls)
    if config.zk_tls_trust is not None:
        return ZkSecurity(None, None, False, config.zk_tls_trust, config.zk_tls_cert, config.zk_tls_key)
    return None
