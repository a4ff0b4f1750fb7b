"""ReadHandle: reading a ledger, its last add confirmed (LAC), and tailing it while it grows.

Readers only ever see committed entries: ``read`` stops at the LAC, the highest entry the writer
saw acknowledged by Qa bookies (for a closed ledger: its last entry). ``read_unconfirmed`` reads past
it at the caller's risk. The local LAC only moves forward: from the bookies (LAC reads, long polls,
piggybacked in entry headers) or from the metadata when the ledger is closed.

``tail`` follows an open ledger: it long-polls the bookies, which park the request until their LAC
passes the reader's (no busy polling), reads what became committed, and ends once the metadata says
the ledger is closed and every entry up to the last one was delivered. Closing is noticed through
the ledger manager's metadata watch, and (should a notification be lost) when a long poll times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from bkclient.digest import DigestManager
from bkclient.entry import LastConfirmedAndEntry, LedgerEntry
from bkclient.ops.read import ReadEntryOp, ReadRangeOp, write_set_bookies
from bkclient.ops.read_lac import ReadLastConfirmedAndEntryOp, ReadLastConfirmedOp, TryReadLastConfirmedOp
from bkclient.ops.recovery import RecoveryContext
from bkclient.ops.tail import StridePolls
from bkmeta.model import LedgerMetadata, Versioned
from bkproto.entry_format import NO_ENTRY
from bkproto.errors import BKError, IncorrectParameterError, NoSuchLedgerError, ReadError

log = logging.getLogger(__name__)

# Entries one tail step reads before it polls again; bounds what a slow consumer holds in memory.
_TAIL_READ_AHEAD = 1000
# How far past the next entry a tailing reader's stride polls reach (ops/tail.py): bounds the
# entries it buffers while the head waits, and the size of one catch-up answer.
TAIL_POLL_WINDOW = 256


class ReadHandle:
    """A handle to read one ledger. Create it through ``BookKeeper.open_ledger``."""

    def __init__(
        self,
        ctx: RecoveryContext,
        ledger_id: int,
        metadata: Versioned[LedgerMetadata],
        digest: DigestManager,
    ) -> None:
        self._ctx = ctx
        self.ledger_id = ledger_id
        self._versioned = metadata
        self._digest = digest
        self.last_add_confirmed = NO_ENTRY
        self.length = 0
        self._metadata_changed = asyncio.Event()
        self._deleted = False
        self._apply_metadata(metadata.value)

    # -- metadata --------------------------------------------------------------------------------

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

    @property
    def versioned_metadata(self) -> Versioned[LedgerMetadata]:
        return self._versioned

    @property
    def is_closed(self) -> bool:
        return self._versioned.value.is_closed

    @property
    def digest(self) -> DigestManager:
        return self._digest

    def update_metadata(self, versioned: Versioned[LedgerMetadata]) -> None:
        """Take newer metadata (from a watch, a write handle's CAS, or a re-read); older or
        equal versions are ignored so a late notification cannot roll the handle back."""
        if versioned.version <= self._versioned.version:
            return
        self._versioned = versioned
        self._apply_metadata(versioned.value)
        self._metadata_changed.set()

    def _apply_metadata(self, md: LedgerMetadata) -> None:
        if md.is_closed:
            self.last_add_confirmed = max(self.last_add_confirmed, md.last_entry_id)
            self.length = md.length

    async def refresh_metadata(self) -> Versioned[LedgerMetadata]:
        """Re-read the metadata from the store (noticing a close or an ensemble change)."""
        self.update_metadata(await self._ctx.ledger_manager.read_ledger_metadata(self.ledger_id))
        return self._versioned

    def _advance_lac(self, lac: int) -> int:
        self.last_add_confirmed = max(self.last_add_confirmed, lac)
        return self.last_add_confirmed

    # -- reads -----------------------------------------------------------------------------------

    def read(self, first: int, last: int) -> AsyncIterator[LedgerEntry]:
        """Entries ``first .. last`` (inclusive), in order, each verified. ``last`` must not pass
        the LAC: if it does, the LAC is asked from the bookies once, then ReadError."""
        return self._read(first, last, confirmed_only=True)

    def read_unconfirmed(self, first: int, last: int) -> AsyncIterator[LedgerEntry]:
        """Like ``read`` without the LAC check: entries past the LAC may be read while they are
        not yet acknowledged (and may never be, if the writer fails)."""
        return self._read(first, last, confirmed_only=False)

    def read_batches(self, first: int, last: int) -> AsyncIterator[list[LedgerEntry]]:
        """Like ``read``, the entries in lists of consecutive entries as the bookies' answers
        bring them (up to ``read_batch_max_entries`` each, E times that for a striped ledger's
        block of E strided answers): for consumers that take entries in
        bulk, one step of the iterator per list rather than per entry."""
        return self._read_batches(first, last, confirmed_only=True)

    async def _read(self, first: int, last: int, confirmed_only: bool) -> AsyncIterator[LedgerEntry]:
        async for batch in self._read_batches(first, last, confirmed_only):
            for entry in batch:
                yield entry

    async def _read_batches(
        self, first: int, last: int, confirmed_only: bool
    ) -> AsyncIterator[list[LedgerEntry]]:
        if first < 0:
            raise IncorrectParameterError(f"ledger {self.ledger_id}: first entry {first} is negative")
        if last < first:
            return
        if confirmed_only and last > self.last_add_confirmed:
            if not self.is_closed:
                await self.read_last_add_confirmed()
            if last > self.last_add_confirmed:
                raise ReadError(
                    f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed "
                    f"{self.last_add_confirmed}"
                )
        op = ReadRangeOp(self._ctx, self._digest, self.metadata, self.ledger_id, first, last)
        async for batch in op.batches():
            yield batch

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        """One entry, confirmed or not."""
        op = ReadEntryOp(
            self._ctx, self._digest, self.ledger_id, entry_id, write_set_bookies(self.metadata, entry_id)
        )
        read = await op.run()
        self._advance_lac(read.last_add_confirmed)
        return read.entry

    # -- LAC -------------------------------------------------------------------------------------

    async def read_last_add_confirmed(self) -> int:
        """The LAC from the bookies once their answers cover every write quorum (for a closed
        ledger: its last entry, without asking). Updates the local LAC."""
        if self.is_closed:
            return self.last_add_confirmed
        lac = await ReadLastConfirmedOp(self._ctx, self.ledger_id, self.metadata, self._digest).run()
        return self._advance_lac(lac)

    async def try_read_last_add_confirmed(self) -> int:
        """Like ``read_last_add_confirmed`` but completes on the first answer that moves the LAC,
        without waiting for quorum coverage."""
        if self.is_closed:
            return self.last_add_confirmed
        op = TryReadLastConfirmedOp(
            self._ctx, self.ledger_id, self.metadata, self._digest, self.last_add_confirmed
        )
        return self._advance_lac(await op.run())

    async def read_lac_long_poll(self, previous_lac: int, timeout: float) -> LastConfirmedAndEntry:  # noqa: ASYNC109 - how long the bookies park the poll
        """Wait up to ``timeout`` seconds for the LAC to pass ``previous_lac``. Returns the LAC
        learned and, when a bookie piggybacked it, the entry ``previous_lac + 1``."""
        if self.is_closed or previous_lac < self.last_add_confirmed:
            lac = self.last_add_confirmed
            if previous_lac >= lac:
                return LastConfirmedAndEntry(lac, None)
            return LastConfirmedAndEntry(lac, await self.read_entry(previous_lac + 1))
        op = ReadLastConfirmedAndEntryOp(
            self._ctx, self.ledger_id, self.metadata, self._digest, previous_lac, timeout
        )
        result = await op.run()
        self._advance_lac(result.last_add_confirmed)
        return result

    # -- tailing ---------------------------------------------------------------------------------

    async def tail(self, start: int = 0) -> AsyncIterator[LedgerEntry]:
        """Every entry from ``start`` in order, as it becomes committed; ends after the last entry
        of the closed ledger. Raises NoSuchLedgerError if the ledger is deleted meanwhile."""
        if start < 0:
            raise IncorrectParameterError(f"ledger {self.ledger_id}: tail start {start} is negative")
        store = self._ctx.ledger_manager
        store.watch_ledger(self.ledger_id, self._on_metadata_event)
        try:
            async for entry in self._tail(start):
                yield entry
        finally:
            store.unwatch_ledger(self.ledger_id, self._on_metadata_event)

    def _on_metadata_event(self, versioned: Versioned[LedgerMetadata] | None) -> None:
        if versioned is None:
            self._deleted = True
            self._metadata_changed.set()
        else:
            self.update_metadata(versioned)

    async def _tail(self, next_id: int) -> AsyncIterator[LedgerEntry]:
        timeout = self._ctx.config.long_poll_timeout_s
        while True:
            lac = self.last_add_confirmed
            if next_id <= lac:
                last = min(lac, next_id + _TAIL_READ_AHEAD - 1)
                async for entry in self._read_with_refresh(next_id, last):
                    yield entry
                    next_id = entry.entry_id + 1
                continue
            if self.is_closed:
                return
            if self._deleted:
                raise NoSuchLedgerError(f"ledger {self.ledger_id} was deleted while being tailed")
            # Fast path: one parked stride poll per bookie, answered with every confirmed entry of
            # its stride.
            self._metadata_changed.clear()
            pipeline = StridePolls(
                self._ctx,
                self._digest,
                self.metadata,
                self.ledger_id,
                next_id,
                TAIL_POLL_WINDOW,
                timeout,
                self._metadata_changed,
            )
            async for entry in pipeline.entries():
                self._advance_lac(pipeline.last_add_confirmed)
                yield entry
                next_id = entry.entry_id + 1
            self._advance_lac(pipeline.last_add_confirmed)
            if pipeline.stopped_by_event or self.last_add_confirmed >= next_id:
                continue  # metadata changed, or the LAC moved without the entry: look again
            # A poll failed or timed out: one step of the quorum-based poll, which also copes with
            # dead bookies and notices a close the watch did not report.
            polled = await self._poll_or_metadata_change(self.last_add_confirmed, timeout)
            if polled is None:
                continue
            piggybacked = polled.entry
            if piggybacked is not None and piggybacked.entry_id == next_id:
                yield piggybacked
                next_id += 1
            elif polled.last_add_confirmed < next_id:
                await self.refresh_metadata()

    async def _poll_or_metadata_change(self, lac: int, poll_timeout_s: float) -> LastConfirmedAndEntry | None:
        self._metadata_changed.clear()
        poll = asyncio.ensure_future(self.read_lac_long_poll(lac, poll_timeout_s))
        changed = asyncio.ensure_future(self._metadata_changed.wait())
        try:
            await asyncio.wait((poll, changed), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # Cancelled (the tail's consumer gave up): the poll goes too, or its later failure
            # would be an exception nobody retrieves.
            poll.cancel()
            raise
        finally:
            changed.cancel()
        if poll.done():
            return poll.result()
        poll.cancel()
        with contextlib.suppress(asyncio.CancelledError, BKError):
            await poll
        return None

    async def _read_with_refresh(self, first: int, last: int) -> AsyncIterator[LedgerEntry]:
        """Read committed entries; if a read fails, the ensemble may have changed since our
        metadata was read: refresh it once and go on from where the failure happened."""
        next_id = first
        try:
            async for entry in self._read(next_id, last, confirmed_only=False):
                yield entry
                next_id = entry.entry_id + 1
            return
        except BKError as exc:
            version = self._versioned.version
            await self.refresh_metadata()
            if self._versioned.version == version:
                raise
            log.info(
                "ledger %d: read of %d failed (%s); retrying with new metadata", self.ledger_id, next_id, exc
            )
        async for entry in self._read(next_id, last, confirmed_only=False):
            yield entry

    async def close(self) -> None:
        """Nothing to release for a read handle; present so every handle closes the same way."""
