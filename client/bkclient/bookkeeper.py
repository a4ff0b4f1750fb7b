"""The client facade: connect to a cluster, create, open, delete and list ledgers.

    async with await BookKeeper.connect("127.0.0.1:2181") as bk:
        wh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        await wh.append(b"payload")
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, password=b"pw")
"""

from __future__ import annotations

import hmac
import logging
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from bkmeta import MetadataClient
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkproto.errors import ClientClosedError, LedgerExistsError, UnauthorizedAccessError

from .config import ClientConfig
from .context import ClientContext
from .digest import DigestManager
from .distribution import validate_quorums
from .ops.recovery import LedgerRecoveryOp
from .read_handle import ReadHandle
from .write_adv_handle import WriteAdvHandle
from .write_handle import WriteHandle

log = logging.getLogger(__name__)

# A fresh ledger id colliding with an existing ledger is retried this many times (create only).
_CREATE_ATTEMPTS = 5


class BookKeeper:
    """An asyncio BookKeeper client. Build with :meth:`connect`; use on one event loop."""

    def __init__(self, ctx: ClientContext, *, owns_metadata: bool = True) -> None:
        self.ctx = ctx
        self._owns_metadata = owns_metadata
        self._closed = False
        # Open write handles, so close() can stop their timers and fail their pending adds.
        self._writers: weakref.WeakSet[WriteHandle] = weakref.WeakSet()

    @classmethod
    async def connect(cls, zk_hosts: str, config: ClientConfig | None = None) -> BookKeeper:
        """Connect to the cluster whose metadata lives in ZooKeeper at ``zk_hosts``. Without
        ``config.security``, TLS settings and credentials come from the environment
        (``bkclient.tls.security_from_environ``)."""
        config = config or ClientConfig()
        zk_options: dict[str, Any] = {"session_timeout_s": config.metadata_timeout_s}
        if config.zk_security is not None:
            zk_options["security"] = config.zk_security
        metadata = await MetadataClient.connect(zk_hosts, **zk_options)
        return cls(ClientContext.create(metadata, config))

    async def close(self) -> None:
        """Close bookie connections (pending adds fail with ClientClosedError) and the session."""
        if self._closed:
            return
        self._closed = True
        for writer in list(self._writers):
            await writer.abort()
        await self.ctx.pool.close()
        if self._owns_metadata:
            await self.ctx.metadata.close()

    async def __aenter__(self) -> BookKeeper:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("BookKeeper client is closed")

    # -- creating ------------------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int | None = None,
        digest: DigestType | int = DigestType.CRC32,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        """Create a ledger on ``ensemble`` bookies; entries go to ``write_quorum`` of them and
        complete after ``ack_quorum`` (default: ``write_quorum``) acks."""
        lid, versioned, digest_manager = await self._create(
            ensemble, write_quorum, ack_quorum, digest, password, custom_metadata, None
        )
        handle = WriteHandle(self.ctx, lid, versioned, digest_manager)
        self._writers.add(handle)
        return handle

    async def create_ledger_adv(
        self,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int | None = None,
        digest: DigestType | int = DigestType.CRC32,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
    ) -> WriteAdvHandle:
        """Like :meth:`create_ledger`, but the caller supplies entry ids (``write(entry_id, data)``)
        and, optionally, the ledger id (LedgerExistsError if taken)."""
        lid, versioned, digest_manager = await self._create(
            ensemble, write_quorum, ack_quorum, digest, password, custom_metadata, ledger_id
        )
        adv = WriteAdvHandle(self.ctx, lid, versioned, digest_manager)
        self._writers.add(adv)
        return adv

    async def _create(
        self,
        ensemble: int,
        write_quorum: int,
        ack_quorum: int | None,
        digest: DigestType | int,
        password: bytes,
        custom_metadata: Mapping[str, bytes] | None,
        ledger_id: int | None,
    ) -> tuple[int, Versioned[LedgerMetadata], DigestManager]:
        self._check_open()
        ack = write_quorum if ack_quorum is None else ack_quorum
        validate_quorums(ensemble, write_quorum, ack)
        digest_type = DigestType(int(digest))
        bookies = self.ctx.placement.new_ensemble(
            ensemble, write_quorum, ack, self.ctx.writable_bookie_racks()
        )
        metadata = LedgerMetadata(
            ensemble_size=ensemble,
            write_quorum_size=write_quorum,
            ack_quorum_size=ack,
            state=LedgerState.OPEN,
            last_entry_id=-1,
            length=0,
            digest_type=digest_type,
            password=bytes(password),
            ctime=self.ctx.clock.time_ms(),
            custom_metadata=dict(custom_metadata or {}),
            segments=(Segment(0, tuple(bookies)),),
        )
        manager = self.ctx.ledger_manager
        for attempt in range(_CREATE_ATTEMPTS):
            lid = ledger_id if ledger_id is not None else await manager.generate_ledger_id()
            try:
                versioned = await manager.create_ledger_metadata(lid, metadata)
            except LedgerExistsError:
                if ledger_id is not None or attempt == _CREATE_ATTEMPTS - 1:
                    raise
                log.warning("generated ledger id %d already exists, trying another", lid)
                continue
            log.debug("created ledger %d on %s", lid, bookies)
            return lid, versioned, DigestManager(lid, password, digest_type)
        raise AssertionError("unreachable")

    # -- opening -------------------------------------------------------------------------------

    async def open_ledger(
        self,
        ledger_id: int,
        password: bytes = b"",
        recovery: bool = True,
        digest: DigestType | int | None = None,
    ) -> ReadHandle:
        """Open a ledger for reading. With ``recovery`` (the default, like BookKeeper's
        ``openLedger``) an open ledger is fenced, recovered and closed first, so the handle sees
        its final content; without it the ledger is read as it is (``openLedgerNoRecovery``)."""
        self._check_open()
        manager = self.ctx.ledger_manager
        # Without recovery the ledger is read as it is, and a watched cache is as fresh as a
        # ZooKeeper read; recovery starts from ZooKeeper's latest (it CASes from that version).
        read = manager.read_ledger_metadata if recovery else manager.read_ledger_metadata_cached
        versioned = await read(ledger_id)
        metadata = versioned.value
        if metadata.password and not hmac.compare_digest(metadata.password, bytes(password)):
            raise UnauthorizedAccessError(f"wrong password for ledger {ledger_id}")
        # Digest type auto-detection (BookKeeper's default): the metadata records the real type,
        # so ``digest`` is accepted for API parity only.
        digest_manager = DigestManager(ledger_id, password, metadata.digest_type)
        if recovery and not metadata.is_closed:
            versioned = await LedgerRecoveryOp(self.ctx, ledger_id, password, digest_manager).run()
        return ReadHandle(self.ctx, ledger_id, versioned, digest_manager)

    # -- the rest ------------------------------------------------------------------------------

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies garbage-collect its entries later."""
        self._check_open()
        await self.ctx.ledger_manager.remove_ledger_metadata(ledger_id)

    async def list_ledgers(self) -> list[int]:
        self._check_open()
        return sorted(await self.ctx.ledger_manager.list_ledgers())

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._check_open()
        return (await self.ctx.ledger_manager.read_ledger_metadata(ledger_id)).value

    async def is_closed(self, ledger_id: int) -> bool:
        return (await self.ledger_metadata(ledger_id)).is_closed
