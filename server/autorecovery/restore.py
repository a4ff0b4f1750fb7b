"""Copy back the entries a registered bookie lost, to that bookie: the repair of a bookie that is
still in the cluster but lacks some of what its slots should hold (a wiped and re-formatted
ledger directory, a deleted entry log).

The bookie stays where the placement policy put it (its slot in the ensemble is unchanged, so no
metadata changes); only the entries it lacks are copied, each read from the other bookies of its
write set (digest verified) and written as a RECOVERY_ADD, byte for byte as stored, which a
fenced ledger takes too. A bookie that cannot take writes (read-only) is replaced instead, by the
caller, through the lost-bookie path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bkclient import BookKeeper
from bkclient.digest import DigestManager
from bkclient.distribution import RoundRobinDistribution
from bkclient.ops.read import ReadEntryOp
from bkclient.ops.recovery import recovery_add
from bkclient.rate_limiter import ByteRateLimiter
from bkmeta.model import LedgerMetadata
from bkproto.errors import BKError, LedgerRecoveryError
from bkproto.errors import TimeoutError as BKTimeoutError

_PARALLEL = 16  # entries in flight per restore: enough to hide a round trip, bounded memory


def _ensemble_at(md: LedgerMetadata, entry_id: int) -> tuple[str, ...]:
    ensemble = md.segments[0].bookies
    for segment in md.segments:
        if segment.first_entry_id > entry_id:
            break
        ensemble = segment.bookies
    return ensemble


class EntryRestorer:
    """Copies ``entry_ids`` of ledger ``ledger_id`` back to ``bookie_id``; ``bytes_copied`` and
    ``entries_copied`` say how much went."""

    def __init__(self, bk: BookKeeper, ledger_id: int, md: LedgerMetadata, bookie_id: str,
                 throttle: ByteRateLimiter | None) -> None:
        self._bk = bk
        self._ledger_id = ledger_id
        self._md = md
        self._bookie_id = bookie_id
        self._throttle = throttle
        self._digest = DigestManager(ledger_id, md.password, md.digest_type)
        self._schedule = RoundRobinDistribution(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
        self.entries_copied = 0
        self.bytes_copied = 0

    async def run(self, entry_ids: Sequence[int]) -> None:
        gate = asyncio.Semaphore(_PARALLEL)

        async def one(entry_id: int) -> None:
            async with gate:
                await self._restore(entry_id)

        try:
            async with asyncio.TaskGroup() as group:
                for entry_id in entry_ids:
                    group.create_task(one(entry_id))
        except* BKError as failed:
            cause: BaseException = failed
            while isinstance(cause, BaseExceptionGroup):
                cause = cause.exceptions[0]
            raise LedgerRecoveryError(
                f"ledger {self._ledger_id}: cannot restore entries to {self._bookie_id}: {cause}"
            ) from cause

    async def _restore(self, entry_id: int) -> None:
        ensemble = _ensemble_at(self._md, entry_id)
        sources = [ensemble[i] for i in self._schedule.write_set(entry_id) if ensemble[i] != self._bookie_id]
        read = await ReadEntryOp(self._bk.ctx, self._digest, self._ledger_id, entry_id, sources).run()
        if self._throttle is not None:
            await self._throttle.acquire(len(read.body))
        try:
            await recovery_add(self._bk.ctx, self._bookie_id, self._ledger_id, entry_id,
                               self._digest.master_key, read.body)
        except TimeoutError:  # the builtin, from wait_for
            raise BKTimeoutError(
                f"bookie {self._bookie_id}: the copy of entry {entry_id} was not acknowledged"
            ) from None
        self.entries_copied += 1
        self.bytes_copied += len(read.body)
