"""The seam between the client and its bookies: what every operation, handle and the connection
pool may ask of one bookie connection (:class:`BookieConnection`), and the pool that hands them out
by bookie id through an injectable :data:`BookieConnector`.

In production the connector opens a :class:`bkclient.bookie_client.BookieClient` (gRPC, the add
port); unit tests and the deterministic simulation plug in connections of their own for the same
bookie ids, and every layer above this module runs unchanged on them.

Nothing here imports gRPC. Errors crossing the seam are the ``bkproto.errors`` family
(:class:`BKError` and its subclasses), raised by the awaitables and handed to add listeners.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from bkproto.errors import BKError, ClientClosedError
from bkproto.v1 import bookie_pb2

if TYPE_CHECKING:
    from .add_stream import AddRequestEncoder

__all__ = [
    "AddCallback",
    "AddListener",
    "AddressResolver",
    "BookieAddress",
    "BookieConnection",
    "BookieConnectionPool",
    "BookieConnector",
    "DecodedAdd",
    "DiskInfo",
    "ReadResult",
    "StrideResult",
    "decode_add",
]


class ReadResult(NamedTuple):
    """One entry read: its body exactly as stored (empty when a long poll's LAC moved on a bookie
    without the entry) and the bookie's LAC."""

    body: bytes
    max_lac: int


class StrideResult(NamedTuple):
    """A stride poll's answer: entries first, first + stride, ... (none when it timed out or the
    bookie does not hold ``first``) and the bookie's LAC."""

    bodies: list[bytes]
    max_lac: int
    more: bool = False  # a standing poll answers again


class StandingStridePoll(Protocol):
    """The answers of one standing stride poll (``BookieConnection.standing_stride_poll``)."""

    async def next(self) -> StrideResult:
        """The next answer; ``more`` says whether another follows."""
        ...

    def cancel(self) -> None:
        """Release the bookie's parked poll; nothing once the last answer came."""
        ...


class DiskInfo(NamedTuple):
    """A bookie's disk space in bytes (GetBookieInfo)."""

    total_bytes: int
    free_bytes: int


# Completion callback of one add: ``None`` on success, the error otherwise.
AddCallback = Callable[[BKError | None], None]


class AddListener(Protocol):
    """Receives add completions without a closure per add (the hot path: a write handle listens
    per ensemble slot, ``token`` being the entry id)."""

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        """One add, ``token``, succeeded (``error`` None) or failed."""
        ...

    def adds_completed(self, bookie_id: str, tokens: Sequence[int]) -> None:
        """Every add of ``tokens`` succeeded (one call for the run of this listener's adds in
        an answer message: per-message rather than per-add work on the hot path)."""
        ...


class BookieConnection(Protocol):
    """The client side of one bookie, as every operation sees it.

    Adds are fire-and-forget with a completion (``add_encoded``, the hot path) or a future
    (``add``); both complete on the event loop with ``None`` or a :class:`BKError` once the bookie
    stored the entry durably. The connection never gives up on an add by itself: callers time
    them out. Reads, LAC and fence calls are awaitables raising :class:`BKError` subclasses
    (``NoSuchEntryError``, ``LedgerFencedError``, ``BookieUnavailableError``, ``TimeoutError``...).
    ``timeout`` is the call's deadline in seconds, ``None`` for the connection's default.
    """

    @property
    def bookie_id(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        """Queue an add serialized by :class:`bkclient.add_stream.AddRequestEncoder` (one element
        of ``AddEntriesRequest.adds`` with its field framing; :func:`decode_add` reads it back).
        Calls ``listener.add_complete(self.bookie_id, token, error or None)`` or includes
        ``token`` in a ``listener.adds_completed(self.bookie_id, tokens)``, on the loop, once,
        possibly before returning (a closed connection)."""
        ...

    def add_bodies(
        self,
        packer: AddRequestEncoder,
        bodies: Sequence[bytes],
        listener: AddListener,
        entry_ids: Sequence[int],
    ) -> None:
        """Queue entries ``entry_ids[i]`` of ``packer``'s ledger given as their bodies
        ``bodies[i]`` (header || digest || payload; no flags), in that order, with the entry ids
        as tokens: the write handle's path. A connection that sends them packs them into
        ``PackedAdds`` groups; one that does not may read each as ``packer.encode(entry_id, body)``.
        Completion as :meth:`add_encoded`."""
        ...

    def add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False
    ) -> asyncio.Future[None]:
        """Queue an add (``recovery``: a RECOVERY_ADD, taken by a fenced ledger too); the future
        completes when the bookie acknowledged it."""
        ...

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence_master_key: bytes | None = None,
        previous_lac: int | None = None,
        long_poll_timeout_ms: int = 0,
        piggyback: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the call's deadline
    ) -> ReadResult:
        """One entry (``entry_id == -1``: the bookie's last). ``fence_master_key`` fences the
        ledger; ``previous_lac`` long-polls until the bookie's LAC passes it or
        ``long_poll_timeout_ms`` expires (LAC moved, entry not held: an empty body, no error);
        ``piggyback`` with ``entry_id == -1`` asks for the entry after ``previous_lac``."""
        ...

    async def read_entries(
        self,
        ledger_id: int,
        first: int,
        max_count: int,
        max_bytes: int,
        *,
        stride: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109 - the call's deadline
    ) -> list[bytes]:
        """Bodies of ``first``, ``first + stride``, ... (at least ``first``, else
        NoSuchEntryError), up to the first not held, ``max_count`` entries or ``max_bytes``."""
        ...

    def standing_stride_poll(
        self,
        ledger_id: int,
        first: int,
        stride: int,
        max_count: int,
        max_bytes: int,
        long_poll_timeout_ms: int,
    ) -> StandingStridePoll:
        """A standing stride poll: parked until the bookie's LAC reaches ``first``, answered with
        the confirmed entries ``first``, ``first + stride``, ... it holds, then parked again from
        the entry after them, until ``max_count`` entries in all; every answer but the last has
        ``more`` set. A timeout, or a LAC past the next entry on a bookie without it, is a last
        answer without entries and with the bookie's LAC. A bookie that predates standing polls
        answers once."""
        ...

    async def write_lac(
        self,
        ledger_id: int,
        lac: int,
        master_key: bytes,
        body: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the call's deadline
    ) -> None:
        """Store an explicit LAC (``body``: the digest-protected LAC the readers verify)."""
        ...

    async def force_ledger(self, ledger_id: int, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 - the call's deadline
        """Returns once everything this bookie acknowledged for the ledger is durable."""
        ...

    async def get_bookie_info(self, *, timeout: float | None = None) -> DiskInfo:  # noqa: ASYNC109 - the call's deadline
        """The bookie's disk capacity and free space."""
        ...

    async def list_entries(self, ledger_id: int, *, timeout: float | None = None) -> list[tuple[int, int]]:  # noqa: ASYNC109 - the call's deadline
        """The entry ids the bookie can serve, as sorted inclusive runs (GetListOfEntriesOfLedger,
        autorecovery's ledger check); NoSuchLedgerError when it holds none."""
        ...

    async def close(self) -> None:
        """Fail outstanding adds and reads with ClientClosedError; later calls fail with it too."""
        ...


class DecodedAdd(NamedTuple):
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool


def decode_add(encoded: bytes) -> DecodedAdd:
    """The fields of an add given to :meth:`BookieConnection.add_encoded`: for connections that
    do not send the bytes on as they are (in-memory bookies)."""
    add = bookie_pb2.AddEntriesRequest.FromString(encoded).adds[0]
    return DecodedAdd(
        add.ledger_id, add.entry_id, add.master_key, add.body, bool(add.flags & bookie_pb2.RECOVERY_ADD)
    )


class BookieAddress(NamedTuple):
    grpc: str  # host:port of the gRPC service
    add: str | None = None  # host:port of the add port, if the bookie has one
    add_reads: bool = False  # that port serves the ReadStream too
    tls: bool = False  # its registration says it speaks only TLS


# Resolves a bookie id to its addresses; ``None`` when the id is not registered.
AddressResolver = Callable[[str], BookieAddress | None]

# Opens the connection to a bookie id at an address (in-memory connectors may ignore the address).
BookieConnector = Callable[[str, BookieAddress], BookieConnection]


class BookieConnectionPool:
    """One connection per bookie id, opened by ``connector`` on first use.

    Ids resolve through ``resolver`` (the registration's service info); an id that does not resolve
    is used as ``host:port`` itself, BookKeeper's default bookie id. A connection whose bookie's
    resolved address changed (restarted elsewhere), or that was closed, is replaced."""

    def __init__(self, connector: BookieConnector, resolver: AddressResolver | None = None) -> None:
        self._connector = connector
        self._resolver = resolver
        self._connections: dict[str, tuple[BookieAddress, BookieConnection]] = {}
        self._retired: list[BookieConnection] = []
        self._closed = False

    def address_of(self, bookie_id: str) -> BookieAddress:
        address = self._resolver(bookie_id) if self._resolver is not None else None
        return address or BookieAddress(bookie_id)

    def get(self, bookie_id: str) -> BookieConnection:
        if self._closed:
            raise ClientClosedError("bookie connection pool is closed")
        known = self._connections.get(bookie_id)
        if known is not None:
            connected_to, connection = known
            if not connection.closed:
                if self._resolver is None:
                    return connection
                address = self._resolver(bookie_id)
                if address is None or address == connected_to:
                    return connection
                self._retired.append(connection)  # closed at pool close: its calls may still be running
        address = self.address_of(bookie_id)
        connection = self._connector(bookie_id, address)
        self._connections[bookie_id] = (address, connection)
        return connection

    async def close(self) -> None:
        self._closed = True
        connections = [c for _, c in self._connections.values()] + self._retired
        self._connections.clear()
        self._retired.clear()
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
