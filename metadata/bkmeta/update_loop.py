"""`MetadataUpdateLoop`: read, test, transform, compare-and-set; on a version conflict re-read and
go again. The one place that loop is written (BookKeeper's ``MetadataUpdateLoop``).

Every change to ledger metadata after its creation (an ensemble change, marking it IN_RECOVERY,
closing it, re-replication naming a new bookie) has the same shape:

1. start from a version of the metadata (one the caller holds, or read from the store);
2. ``needs_transformation(metadata)``: is there anything to do? ``False`` returns that version
   as it is (the change is already there, say another client closed the ledger at the same
   point). The predicate may also *raise* to refuse the metadata it sees (a writer that finds
   its ledger IN_RECOVERY is fenced); that is how a caller says "do not retry";
3. ``transform(metadata)``: the new metadata;
4. write it with the version it was made from as the CAS token;
5. on ``MetadataVersionError`` (someone else wrote in between) read the current version and go
   back to 2: the predicate and the transform see the other writer's result.

The loop is bounded (``max_attempts`` CAS tries, then ``MetadataVersionError``): a ledger whose
metadata changes under every try points at a bug or a storm, not at something to spin on.

Cancel safety: the loop keeps no state outside its own frame and calls ``on_read`` only with a
version it has read. A caller cancelled while a write is in flight does not know whether the
write applied; its own copy is unchanged, and its next update (or read) finds out, since the CAS
token it holds is then stale.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from bkmeta.model import LedgerMetadata, Versioned
from bkproto.errors import MetadataVersionError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Far above what contention between a writer, a recoverer and a few autorecovery workers needs.
DEFAULT_MAX_ATTEMPTS = 100


class VersionedUpdateLoop(Generic[T]):
    """The loop over any versioned value, given how to read it and how to CAS it."""

    def __init__(
        self,
        what: str,
        read: Callable[[], Awaitable[Versioned[T]]],
        write: Callable[[T, int], Awaitable[Versioned[T]]],
        needs_transformation: Callable[[T], bool],
        transform: Callable[[T], T],
        *,
        current: Versioned[T] | None = None,
        on_read: Callable[[Versioned[T]], None] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        """``what`` names the value in logs and errors; ``current`` is the version to start
        from (``None``: read it first); ``on_read`` hears of every version read after a
        conflict (to refresh a cached copy)."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._what = what
        self._read = read
        self._write = write
        self._needs_transformation = needs_transformation
        self._transform = transform
        self._current = current
        self._on_read = on_read
        self._max_attempts = max_attempts
        self.attempts = 0  # CAS writes tried by the last run (observability, tests)

    async def run(self) -> Versioned[T]:
        """The version written, or the version found that needed no change."""
        self.attempts = 0
        versioned = self._current if self._current is not None else await self._read()
        while True:
            if not self._needs_transformation(versioned.value):
                return versioned
            updated = self._transform(versioned.value)
            self.attempts += 1
            try:
                return await self._write(updated, versioned.version)
            except MetadataVersionError as exc:
                if self.attempts >= self._max_attempts:
                    raise MetadataVersionError(
                        f"{self._what}: {self.attempts} compare-and-set conflicts in a row; giving up"
                    ) from exc
                log.info("%s changed at version %d; reading it again", self._what, versioned.version)
            versioned = await self._read()
            if self._on_read is not None:
                self._on_read(versioned)


class LedgerMetadataReadWrite(Protocol):
    """The two ledger manager calls the loop needs (``bkmeta.ledger_manager.LedgerManager``)."""

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]: ...

    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]: ...


class MetadataUpdateLoop(VersionedUpdateLoop[LedgerMetadata]):
    """The loop over one ledger's metadata in a ledger manager."""

    def __init__(
        self,
        store: LedgerMetadataReadWrite,
        ledger_id: int,
        needs_transformation: Callable[[LedgerMetadata], bool],
        transform: Callable[[LedgerMetadata], LedgerMetadata],
        *,
        current: Versioned[LedgerMetadata] | None = None,
        on_read: Callable[[Versioned[LedgerMetadata]], None] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        async def read() -> Versioned[LedgerMetadata]:
            return await store.read_ledger_metadata(ledger_id)

        async def write(md: LedgerMetadata, version: int) -> Versioned[LedgerMetadata]:
            return await store.write_ledger_metadata(ledger_id, md, version)

        super().__init__(
            f"ledger {ledger_id} metadata",
            read,
            write,
            needs_transformation,
            transform,
            current=current,
            on_read=on_read,
            max_attempts=max_attempts,
        )
