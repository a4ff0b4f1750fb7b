"""Named logs from the client's side: write ledgers as segments of a log, commit them as one.

The parallel-ingestion protocol (the Spark sink's, usable without Spark):

1. The coordinator picks a ``write_id`` (any unique string).
2. Each worker calls :meth:`NamedLogs.open_segment`, appends its entries, and closes the segment;
   its :class:`~bkmeta.named_log.LogSegment` goes back to the coordinator. The ledger is
   registered under the log's ``pending/`` before its first entry.
3. The coordinator calls :meth:`NamedLogs.commit` with every worker's segment: they join the log
   in one ZooKeeper transaction, in the order given. Ledgers this write registered but did not
   commit (a worker attempt that died, say) are deleted then. Or it calls :meth:`NamedLogs.abort`,
   which deletes every ledger of the write, and (unless the write id comes back in a retry)
   marks the write aborted: a worker that opens a segment after that fails, its ledger deleted,
   and the write can no longer commit.

Readers see a log only as committed segments, all of them closed ledgers, so a reader never sees
a partial write. :meth:`NamedLogs.truncate` applies retention: the oldest commits leave the log
and their ledgers are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkmeta.log_retention import Retention, Truncation, apply_retention
from bkmeta.model import DigestType
from bkmeta.named_log import (
    LOG_NAME_KEY,
    LOGS_ROOT,
    WRITE_ID_KEY,
    CommitResult,
    LogCommit,
    LogSegment,
    LogStore,
    PendingLedger,
    check_log_name,
    check_write_id,
)
from bkproto.errors import BKError, IncorrectParameterError, NoSuchLedgerError, UnexpectedConditionError

if TYPE_CHECKING:  # annotations only: the options and the log layout need no client loaded
    from .bookkeeper import BookKeeper
    from .entry import LedgerEntry
    from .write_handle import WriteHandle

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SegmentOptions:
    """How segment ledgers are created (BookKeeper's -e/-w/-a, digest and password).

    2/2/2 by default, as Pulsar's managed ledgers: two copies, like 3/2/2, but with the ensemble
    equal to the write quorum every bookie holds every entry, so a reader fetches a thousand
    consecutive entries per call (a striped ledger is read in strided calls, a few times more of
    them). A job writes a ledger per task, so placement spreads the load anyway."""

    ensemble: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    digest: DigestType = DigestType.CRC32C
    password: bytes = b""

    def __post_init__(self) -> None:
        if not self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise IncorrectParameterError(
                f"need ensemble >= write quorum >= ack quorum >= 1, got "
                f"{self.ensemble}/{self.write_quorum}/{self.ack_quorum}"
            )


class SegmentWriter:
    """One worker's ledger of a log. ``close()`` returns the segment to hand to the commit."""

    # Values per append_batch_async of append_many: beyond the room wait_writable saw, a batch's
    # adds wait in the handle (bounded by max_waiting_adds), so this bounds that overshoot.
    APPEND_BATCH = 1000

    def __init__(self, handle: WriteHandle, write_id: str, task: int) -> None:
        self.handle = handle
        self._write_id = write_id
        self._task = task
        self.entries = 0
        self.length = 0
        self.error: BKError | None = None  # the first failed add of append_many

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    def counted(self, data: bytes) -> bytes:
        """Count ``data`` as appended (the caller appends it through ``handle``)."""
        self.entries += 1
        self.length += len(data)
        return data

    async def append(self, data: bytes) -> int:
        """Append and wait for the acks (throughput comes from :meth:`append_many`)."""
        return await self.handle.append(self.counted(data))

    async def append_many(self, values: Sequence[bytes]) -> None:
        """Send ``values`` without waiting for their acks; returns once all are sent, waiting
        for room under the handle's outstanding limits first (the backpressure). A failed add
        is raised by the next call, or by :meth:`close`. Values go in batches of at most
        ``APPEND_BATCH`` entries (``WriteHandle.append_batch_async``: one future per batch)."""
        handle = self.handle
        chunk = self.APPEND_BATCH
        for start in range(0, len(values), chunk):
            if self.error is not None:
                raise self.error
            await handle.wait_writable()
            batch = list(values[start : start + chunk])
            handle.append_batch_async(batch).add_done_callback(self._batch_completed)
            self.entries += len(batch)
            self.length += sum(map(len, batch))

    def _batch_completed(self, future: asyncio.Future[int]) -> None:
        error = future.exception()
        if isinstance(error, BKError) and self.error is None:
            self.error = error

    async def close(self) -> LogSegment:
        try:
            await self.handle.close()
        except BKError:
            if self.error is not None:
                raise self.error from None  # the add that failed says more than the close
            raise
        if self.error is not None:
            raise self.error
        if self.handle.last_add_confirmed != self.entries - 1:
            raise UnexpectedConditionError(
                f"ledger {self.ledger_id}: closed at entry {self.handle.last_add_confirmed} "
                f"but {self.entries} entries were counted"
            )
        return LogSegment(self.ledger_id, self.entries, self.length, self._write_id, self._task)


class NamedLogs:
    """Named logs of one cluster, through ``bk``'s metadata connection."""

    def __init__(self, bk: BookKeeper, root: str = LOGS_ROOT) -> None:
        self._bk = bk
        self.store = LogStore(bk.ctx.metadata.zk, root)

    async def names(self) -> list[str]:
        return await self.store.names()

    async def segments(self, name: str) -> list[LogSegment]:
        return await self.store.segments(name)

    async def commits(self, name: str) -> list[LogCommit]:
        """The log's commits in order, each with its number and segments."""
        return await self.store.commits(name)

    async def next_seq(self, name: str) -> int:
        """The number the log's next commit will get (0 if the log does not exist yet)."""
        return await self.store.next_seq(name)

    async def pending(self, name: str) -> dict[int, PendingLedger]:
        """Ledgers registered to writes not committed yet (or whose writer died)."""
        return await self.store.pending(name)

    async def truncate(
        self, name: str, *, keep_commits: int | None = None, max_age_s: float | None = None
    ) -> Truncation:
        """Retention: remove the commits older than ``max_age_s`` or not among the newest
        ``keep_commits`` (whole writes, oldest first) and delete their ledgers."""
        retention = Retention(keep_commits, max_age_s)
        return await apply_retention(self.store, self._bk.ctx.ledger_manager, name, retention)

    async def open_segment(
        self, name: str, write_id: str, task: int, options: SegmentOptions | None = None
    ) -> SegmentWriter:
        """Create the log if needed, and a ledger registered as ``write_id``'s. Fails with
        :class:`IllegalOpError` (the ledger deleted) if the write was aborted, even while this
        call ran (:meth:`bkmeta.named_log.LogStore.register_pending`)."""
        check_log_name(name)
        check_write_id(write_id)
        options = options or SegmentOptions()
        await self.store.ensure(name)
        handle = await self._bk.create_ledger(
            options.ensemble, options.write_quorum, options.ack_quorum, options.digest,
            options.password, {LOG_NAME_KEY: self.store.path(name).encode(), WRITE_ID_KEY: write_id.encode()},
        )
        try:
            await self.store.register_pending(name, handle.ledger_id, write_id)
        except BaseException:
            await handle.abort()
            await self._delete_quietly(handle.ledger_id)
            raise
        return SegmentWriter(handle, write_id, task)

    async def commit(
        self,
        name: str,
        write_id: str,
        segments: Sequence[LogSegment | None],
        *,
        overwrite: bool = False,
        txn: tuple[str, int] | None = None,
    ) -> CommitResult:
        """Make ``segments`` part of the log, in this order (``None`` and empty ones are skipped:
        a task that wrote nothing). Then, best effort, delete what this write left uncommitted
        and, after an overwrite, the replaced ledgers. A refused ``txn`` (committed before)
        deletes this write's ledgers instead: the log already holds that data."""
        await self.store.ensure(name)
        kept = [s for s in segments if s is not None and s.entries > 0]
        for seg in kept:
            if seg.write_id != write_id:
                raise IncorrectParameterError(
                    f"log {name!r}: the segment of ledger {seg.ledger_id} is write "
                    f"{seg.write_id!r}'s, not {write_id!r}'s"
                )
        result = await self.store.commit(name, write_id, kept, overwrite=overwrite, txn=txn)
        if not result.committed:
            log.warning("log %s: write %s refused: %s already committed version %s; its ledgers go",
                        name, write_id, txn[0] if txn else None, result.last_version)
        await self._tidy(name, write_id, result)
        return result

    async def _tidy(self, name: str, write_id: str, result: CommitResult) -> None:
        """After a commit: nothing here may fail it, since the log already says what it holds."""
        try:
            await self._delete_write(name, write_id)
            for seg in result.replaced:
                await self._delete_quietly(seg.ledger_id)
        except BKError as e:
            log.warning("log %s: clean-up after write %s stopped (orphans stay for `pybk shell loggc`): %s",
                        name, write_id, e)

    async def abort(self, name: str, write_id: str, *, reusable: bool = False) -> None:
        """Delete every ledger ``write_id`` registered and did not commit (a ledger stops being
        pending in the transaction that commits it, so an abort never deletes what a log names).

        The write is marked aborted first, so a worker of it that registers a ledger later
        deletes that ledger and fails, and a commit of it is refused. ``reusable``: the write id
        comes back when the write is retried (a Spark stream's id is its batch id), so no marker
        is left, since it would refuse the retry too. Then a worker of the aborted attempt that
        registers after this sweep is swept by the retry's commit (or ``pybk shell loggc``)."""
        check_write_id(write_id)
        if reusable:
            if await self.store.exists(name):
                await self._delete_write(name, write_id)
            return
        for ledger_id in await self.store.abort(name, write_id):  # marked, then claimed
            await self._delete_quietly(ledger_id)

    async def discard(self, name: str, writer: SegmentWriter) -> None:
        """Give up one segment (its worker failed): its adds stop, its ledger goes."""
        await writer.handle.abort()
        if await self.store.claim_pending(name, writer.ledger_id):
            await self._delete_quietly(writer.ledger_id)

    async def _delete_write(self, name: str, write_id: str) -> None:
        """Every ledger still pending for ``write_id`` goes (it was not committed)."""
        # The pending znodes first: once one is gone no commit can take its ledger, so a
        # commit still in flight can never end up naming a deleted one.
        for ledger_id in await self.store.claim_write(name, write_id):
            await self._delete_quietly(ledger_id)

    async def _delete_quietly(self, ledger_id: int) -> None:
        with contextlib.suppress(NoSuchLedgerError):
            await self._bk.delete_ledger(ledger_id)

    async def read(self, name: str, password: bytes = b"") -> AsyncIterator[LedgerEntry]:
        """Every entry of the log, segment after segment, in order."""
        for seg in await self.store.segments(name):
            async for entry in self.read_segment(seg, password):
                yield entry

    async def read_segment(
        self, seg: LogSegment, password: bytes = b"", first: int = 0, last: int | None = None
    ) -> AsyncIterator[LedgerEntry]:
        """Entries ``first .. last`` of a segment (by default all of them), in order."""
        async for batch in self.read_segment_batches(seg, password, first, last):
            for entry in batch:
                yield entry

    async def read_segment_batches(
        self, seg: LogSegment, password: bytes = b"", first: int = 0, last: int | None = None
    ) -> AsyncIterator[list[LedgerEntry]]:
        """:meth:`read_segment`'s entries in lists of consecutive entries, as the bookies'
        answers bring them (:meth:`bkclient.read_handle.ReadHandle.read_batches`)."""
        last = seg.entries - 1 if last is None else min(last, seg.entries - 1)
        if first > last:
            return
        handle = await self._bk.open_ledger(seg.ledger_id, password, recovery=False)
        try:
            async for batch in handle.read_batches(first, last):
                yield batch
        finally:
            await handle.close()
