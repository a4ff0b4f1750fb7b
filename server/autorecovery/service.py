"""Automatic re-replication of lost bookies (BookKeeper's AutoRecovery: auditor plus replication
worker, here one leader-elected loop).

Any number of ``pybk autorecovery`` processes may run; one leads (:mod:`autorecovery.leader`) and
the others wait to take over. The leader checks the cluster whenever the set of registered
bookies changes, and every ``auditorPeriodicBookieCheckInterval``:

1. A bookie is *lost* when some ledger's metadata names it but it is registered neither as
   writable nor as read-only. A bookie back within ``lostBookieRecoveryDelay`` is left alone, so a
   restart does not copy its data needlessly; with more than one bookie gone nothing waits, as in
   BookKeeper, since one more loss could leave entries with no copy.
2. For the bookies lost longer than that, every ledger naming them is re-replicated, one at a
   time (:meth:`bkclient.BookKeeperAdmin.recover_ledger`). An open ledger still writing to a lost
   bookie is left to its writer, which replaces the bookie at its next add, for
   ``openLedgerRereplicationGracePeriod``; after that it is fenced and closed, as in BookKeeper.
3. Anything not done (no bookie to copy to, an unreadable entry, a writer's grace) is retried.

The operator's switches live in ZooKeeper where BookKeeper keeps them (:mod:`.switches`;
``pybk shell autorecovery``, ``lostbookierecoverydelay``, ``triggeraudit``): while re-replication
is disabled the leader keeps watching but copies nothing, and stops between ledgers when it is
disabled mid-run; the cluster's ``lostBookieRecoveryDelay`` znode, seeded from the configuration,
overrides the configured delay. A delay counts from when the bookie was first seen gone, or from
the operator's last change of it. Either switch wakes the leader.

The check reads every ledger's metadata, so its cost grows with the number of ledgers; it runs on
bookie changes, retries and the periodic interval only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry

from bkclient import BookKeeper, BookKeeperAdmin, LedgerRecovery, NoSuchLedgerError
from bkclient.admin import SkipReason
from bookie.config import AutoRecoverySettings
from bookie.tasks import cancel_and_wait

from .leader import LeaderElection
from .lost_bookies import LostBookieClock
from .stats import AutoRecoveryStats
from .switches import SwitchReader

log = logging.getLogger(__name__)

RETRY_S = 10.0  # until the next check when something was left undone; doubles while it stays so
MAX_RETRY_S = 300.0
MIN_CHECK_GAP_S = 1.0  # a burst of bookie changes is one check, not one per change
_IDLE_WAIT_S = 3600.0  # periodic checks off and nothing pending: only changes wake it
_LEADER_ERROR_PAUSE_S = 5.0


class AutoRecovery:
    """``start()``/``close()`` own the election and the leader's loop; ``bk`` is the caller's."""

    def __init__(
        self,
        bk: BookKeeper,
        settings: AutoRecoverySettings,
        identity: str,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._bk = bk
        self._settings = settings
        self._election = LeaderElection(
            bk.ctx.metadata.zk, bk.ctx.metadata.layout.auditor_leader, identity
        )
        self._control = bk.ctx.metadata.replication_control
        # Wakes the leader's loop: a change of the registered bookies or of an operator's switch.
        self._wake = asyncio.Event()
        self._switches = SwitchReader(bk.ctx.metadata.zk, self._control, settings.lost_bookie_delay_s,
                                      self._wake.set)
        self._admin = BookKeeperAdmin(bk, replication_rate_bytes=settings.replication_rate_bytes)
        self._lost = LostBookieClock()
        self._retry_s = RETRY_S
        self._task: asyncio.Task[None] | None = None
        self.stats = AutoRecoveryStats(registry or CollectorRegistry())

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    async def start(self) -> None:
        await self._election.start()
        self._task = asyncio.create_task(self._run(), name="autorecovery")

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._election.close()

    async def _run(self) -> None:
        term = 0
        while True:
            await self._election.lead()
            if term != self._election.terms:  # not after a failed check: the term's clocks go on
                term = self._election.terms
                # how long a bookie has been gone was not watched while standing by
                self._lost.reset()
                self._retry_s = RETRY_S
                self._switches.new_term()
            work = asyncio.create_task(self._lead())
            lost = asyncio.create_task(self._election.lost())
            self.stats.leader.set(1)
            try:
                await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.stats.leader.set(0)
                for task in (work, lost):
                    task.cancel()
                await asyncio.gather(work, lost, return_exceptions=True)
            if work.done() and not work.cancelled() and work.exception() is not None:
                log.error("autorecovery leader loop failed: %r; starting over", work.exception())
                await asyncio.sleep(_LEADER_ERROR_PAUSE_S)

    async def _lead(self) -> None:
        """Check, then wait for a change of the registered bookies or the next check's time."""
        watcher = self._bk.ctx.bookie_watcher
        wake = self._wake

        def on_change(*_: object) -> None:
            wake.set()

        watcher.add_listener(on_change)
        try:
            while True:
                wake.clear()
                wait_s = await self.check()
                await asyncio.sleep(MIN_CHECK_GAP_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), max(0.0, wait_s - MIN_CHECK_GAP_S))
        finally:
            watcher.remove_listener(on_change)

    async def check(self) -> float:
        """One pass; returns the seconds until the next one is due without a bookie change."""
        settings = self._settings
        loop = asyncio.get_running_loop()
        switches = await self._switches.read()
        enabled, delay_s = switches.enabled, switches.delay_s
        self.stats.replication_enabled.set(int(enabled))
        self.stats.lost_bookie_delay.set(delay_s)
        admin = self._admin
        named = await admin.ledgers_by_bookie()
        missing = await admin.unregistered(named)
        now = loop.time()
        seen = self._lost.observe(missing, now, delay_s, audit_now=switches.audit_now,
                                  delay_changed=switches.delay_changed)
        self._switches.applied(switches)
        for bookie_id in seen.gone:
            log.warning("bookie %s is gone (named by ledgers, not registered); re-replicating its data"
                        " after lostBookieRecoveryDelay (%g s)", bookie_id, delay_s)
        for bookie_id in seen.back:
            log.info("bookie %s is back or no longer named by any ledger", bookie_id)
        if seen.several_lost:
            log.warning("%d bookies are gone: re-replicating without waiting out lostBookieRecoveryDelay",
                        seen.several_lost)
        due = seen.due
        wake = [settings.check_interval_s] if settings.check_interval_s > 0 else []
        if seen.next_due_in_s is not None:
            wake.append(seen.next_due_in_s)
        if due and enabled:
            ledgers = set().union(*(named[b] for b in due))
            if await self._recover(due, ledgers, now):
                self._retry_s = RETRY_S
            else:
                wake.append(self._retry_s)
                self._retry_s = min(self._retry_s * 2, MAX_RETRY_S)
            # an open ledger left to its writer is fenced as soon as the grace ends, not at a retry
            grace = settings.open_ledger_grace_s
            wake += [grace - gone for b in due if (gone := self._lost.gone_for(b, now)) < grace]
        self.stats.checks.inc()
        self.stats.lost_bookies.set(len(missing))
        return max(0.1, min(wake)) if wake else _IDLE_WAIT_S

    async def _recover(self, due: frozenset[str], ledgers: set[int], now: float) -> bool:
        """Re-replicate the ``due`` bookies' data (in ``ledgers``, those naming them, as the
        check just read); True when nothing was left undone."""
        grace = self._settings.open_ledger_grace_s
        graced = frozenset(b for b in due if self._lost.gone_for(b, now) >= grace)
        admin = self._admin
        log.warning("bookies lost: %s; re-replicating their ledgers", ", ".join(sorted(due)))
        final: list[LedgerRecovery] = []
        for ledger_id in sorted(ledgers):
            # As BookKeeper's replication worker does before each ledger: an operator's disable
            # takes effect between ledgers, not after the whole run.
            if not await self._control.is_enabled():
                log.warning("ledger re-replication disabled meanwhile: stopping before ledger %d", ledger_id)
                self._record(final)
                return False
            first = await admin.recover_ledger(ledger_id, due, fence_open_ledgers=False)
            if first is None:
                continue  # deleted meanwhile, or no longer names a lost bookie
            report: LedgerRecovery | None = first
            if first.skipped is SkipReason.WRITER_MAY_REPLACE:
                if graced and await self._writes_to(first.ledger_id, graced):
                    report = await admin.recover_ledger(first.ledger_id, due)  # fenced now
                else:
                    log.info("ledger %d: open on a lost bookie; its writer has until the grace period"
                             " ends to replace it", first.ledger_id)
            if report is not None:  # None: deleted meanwhile
                final.append(report)
        self._record(final)
        return all(r.ok and r.skipped is None for r in final)

    async def _writes_to(self, ledger_id: int, bookies: frozenset[str]) -> bool:
        try:
            md = await self._bk.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return False
        return not md.is_closed and not bookies.isdisjoint(md.last_ensemble)

    def _record(self, reports: list[LedgerRecovery]) -> None:
        for report in reports:
            self.stats.entries_copied.inc(report.entries_copied)
            if report.skipped is not None:
                continue  # left to its writer for now (logged above)
            (self.stats.ledgers_rereplicated if report.ok else self.stats.ledger_failures).inc()
            if report.ok:
                log.info("ledger %d re-replicated: %d entries copied%s", report.ledger_id,
                         report.entries_copied, " (fenced first)" if report.fenced else "")
            else:
                log.warning("ledger %d not re-replicated: %s; will retry", report.ledger_id, report.error)
