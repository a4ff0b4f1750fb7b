"""Replication workers (BookKeeper's ``ReplicationWorker``): every ``pybk autorecovery`` process
runs some, and they share the work through ZooKeeper (:mod:`bkmeta.underreplication`).

A worker picks a marked ledger at random, takes its lock (an ephemeral znode: a worker that dies
mid-copy leaves it to expire with its session, and another takes over), and repairs what the
marker names, then deletes the marker at the version it read (a replica marked meanwhile stays
marked) and releases the lock. For each replica the marker names:

- a bookie no longer registered (lost): its entries are copied to a bookie the placement policy
  chooses and the metadata swapped (:meth:`bkclient.BookKeeperAdmin.recover_ledger`, whose swap
  is the project's metadata update loop). An open ledger still writing to it is left to its writer
  for ``openLedgerRereplicationGracePeriod`` from the marker's ctime; then it is fenced and closed;
- a registered, writable bookie: its missing entries are found again (the auditor's finding may be
  stale) and only those are copied back to it (:mod:`.restore`);
- a registered bookie that cannot take writes (read-only) and lacks entries: replaced, as if lost.

A ledger that cannot be repaired now (no bookie to copy to, an unreadable entry, a writer's grace)
is released and left alone by this worker for ``rwRereplicateBackoffMs``. While an operator has
disabled re-replication, workers take no ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass

from bkclient import BookKeeper, BookKeeperAdmin
from bkclient.admin import SkipReason
from bkmeta.underreplication import Marker, UnderreplicationIndex
from bkproto.errors import BKError, NoSuchLedgerError
from bookie.config import AutoRecoverySettings

from .checks import missing_on
from .restore import EntryRestorer
from .stats import AutoRecoveryStats

log = logging.getLogger(__name__)

POLL_S = 2.0  # between looks at the index when it was empty (the local auditor wakes it sooner)
_ERROR_PAUSE_S = 2.0


@dataclass
class Repair:
    """What one repair of one ledger did."""

    done: bool = True  # everything the marker named is repaired: clear it
    entries: int = 0
    bytes: int = 0
    error: str | None = None


class ReplicationWorker:
    def __init__(
        self,
        bk: BookKeeper,
        admin: BookKeeperAdmin,
        index: UnderreplicationIndex,
        settings: AutoRecoverySettings,
        stats: AutoRecoveryStats,
        name: str,
        wake: asyncio.Event,
    ) -> None:
        self._bk = bk
        self._admin = admin
        self._index = index
        self._settings = settings
        self._stats = stats
        self._name = name
        self._wake = wake
        self._throttle = admin.throttle  # one rate over every copy of the process
        self._backoff: dict[int, float] = {}  # ledger -> loop time before which this worker skips it
        self.current: int | None = None  # the ledger being repaired (tests, logs)

    async def run(self) -> None:
        control = self._bk.ctx.metadata.replication_control
        while True:
            try:
                if not await control.is_enabled():
                    await self._idle()
                    continue
                if not await self.take_one():
                    await self._idle()
            except BKError as exc:
                log.warning("%s: %s; trying again", self._name, exc)
                await asyncio.sleep(_ERROR_PAUSE_S)

    async def _idle(self) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def take_one(self) -> bool:
        """Repair one marked ledger this worker could lock; False if there was none."""
        now = asyncio.get_running_loop().time()
        self._backoff = {lid: t for lid, t in self._backoff.items() if t > now}
        candidates = [lid for lid in await self._index.ledger_ids() if lid not in self._backoff]
        random.shuffle(candidates)  # workers of several processes do not all queue on the first
        for ledger_id in candidates:
            if not await self._index.try_lock(ledger_id):
                continue
            self.current = ledger_id
            try:
                await self._repair_locked(ledger_id)
            finally:
                self.current = None
                await self._index.release(ledger_id)
            return True
        return False

    async def _repair_locked(self, ledger_id: int) -> None:
        marker = await self._index.get(ledger_id)
        if marker is None:
            return  # repaired by another worker between our listing and our lock
        started = time.monotonic()
        try:
            repair = await self.repair(marker)
        except BKError as exc:
            repair = Repair(done=False, error=f"{type(exc).__name__}: {exc}")
        stats = self._stats
        stats.rereplicate.observe(time.monotonic() - started)
        stats.entries_written.inc(repair.entries)
        stats.entries_copied.inc(repair.entries)
        stats.bytes_written.inc(repair.bytes)
        if repair.entries:
            stats.ledgers_replicated.inc()
        if repair.error is not None:
            stats.replicate_exceptions.inc()
            stats.ledger_failures.inc()
            log.warning("ledger %d not re-replicated: %s; will retry", ledger_id, repair.error)
        if repair.done:
            if repair.entries:  # counted first: whoever sees the mark gone sees the count
                stats.ledgers_rereplicated.inc()
                log.info("ledger %d re-replicated: %d entries copied (%s)", ledger_id, repair.entries,
                         self._name)
            await self._index.mark_replicated(marker)
        else:
            backoff_s = self._settings.rereplicate_backoff_s
            self._backoff[ledger_id] = asyncio.get_running_loop().time() + backoff_s

    async def repair(self, marker: Marker) -> Repair:
        bk = self._bk
        ledger_id = marker.ledger_id
        try:
            md = await bk.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return Repair()  # deleted: nothing left to protect
        watcher = bk.ctx.bookie_watcher
        named = md.all_bookies()
        lost = frozenset([b for b in marker.replicas if b in named and not await watcher.is_registered(b)])
        repair = Repair()
        if lost:
            graced = (time.time() * 1000 - marker.ctime_ms) >= self._settings.open_ledger_grace_s * 1000
            report = await self._admin.recover_ledger(ledger_id, lost, fence_open_ledgers=graced)
            if report is not None:
                repair.entries += report.entries_copied
                if report.skipped is SkipReason.WRITER_MAY_REPLACE:
                    log.info("ledger %d: open on a lost bookie; its writer has until the grace period"
                             " ends to replace it", ledger_id)
                    repair.done = False
                elif not report.ok:
                    repair.done, repair.error = False, report.error
                elif report.fenced:
                    log.info("ledger %d: fenced and closed to re-replicate it", ledger_id)
            try:
                md = await bk.ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                return repair
        if not md.is_closed:
            return repair  # a registered bookie of an open ledger: the ledger check does not look there
        writable = watcher.writable_bookies()
        for bookie_id in sorted(marker.replicas - lost):
            if bookie_id not in md.all_bookies():
                continue
            missing = await missing_on(bk, ledger_id, md, bookie_id)
            if not missing:
                continue
            if bookie_id in writable:
                log.info("ledger %d: restoring the %d entries bookie %s lacks", ledger_id, len(missing),
                         bookie_id)
                restorer = EntryRestorer(bk, ledger_id, md, bookie_id, self._throttle)
                try:
                    await restorer.run(missing)
                finally:
                    repair.entries += restorer.entries_copied
                    repair.bytes += restorer.bytes_copied
            else:
                log.info("ledger %d: bookie %s lacks %d entries and takes no writes: replacing it",
                         ledger_id, bookie_id, len(missing))
                report = await self._admin.recover_ledger(ledger_id, frozenset({bookie_id}))
                if report is not None:
                    repair.entries += report.entries_copied
                    if not report.ok:
                        repair.done, repair.error = False, report.error
        return repair
