"""AutoRecovery (BookKeeper's auditor plus replication workers): under-replicated ledgers are
found, marked in ZooKeeper, and repaired by workers that share the work.

Any number of ``pybk autorecovery`` processes may run. One leads (:mod:`autorecovery.leader`)
and runs the **auditor**, which marks ledgers under ``underreplication/ledgers``
(:mod:`bkmeta.underreplication`); every process runs **replication workers** (:mod:`.worker`)
that lock a marked ledger, copy only what is missing, and clear the mark. The auditor's checks:

1. The **bookie check**, whenever the set of registered bookies changes and every
   ``auditorPeriodicBookieCheckInterval``: a bookie is *lost* when some ledger's metadata names it
   but it is registered neither as writable nor as read-only. A bookie back within
   ``lostBookieRecoveryDelay`` is left alone, so a restart does not copy its data needlessly; with
   more than one bookie gone nothing waits, as in BookKeeper, since one more loss could leave
   entries with no copy. Every ledger naming a bookie lost longer than that is marked with it.
2. The **ledger check** every ``auditorPeriodicCheckInterval`` (:mod:`.checks`): every registered
   bookie of every closed ledger is asked which entries it holds; a bookie lacking some (a wiped
   and re-formatted directory, a deleted entry log) is marked on that ledger. Paced by
   ``auditorLedgerCheckEntriesPerSecond``; when it last ended is kept in
   ``underreplication/checkallledgersctime`` so a new leader does not start it over at once.

An open ledger still writing to a lost bookie is left to its writer, which replaces the bookie at
its next add, for ``openLedgerRereplicationGracePeriod`` from the mark; after that a worker fences
and closes it, as in BookKeeper.

The operator's switches live in ZooKeeper where BookKeeper keeps them (:mod:`.switches`;
``pybk shell autorecovery``, ``lostbookierecoverydelay``, ``triggeraudit``): while re-replication
is disabled the leader keeps watching but marks nothing and runs no ledger check, and workers take
no ledger (a worker finishes the ledger it holds); the cluster's ``lostBookieRecoveryDelay``
znode, seeded from the configuration, overrides the configured delay. A delay counts from when the
bookie was first seen gone, or from the operator's last change of it. Either switch wakes the
leader.

The bookie check reads every ledger's metadata, so its cost grows with the number of ledgers; it
runs on bookie changes and the periodic interval only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import CollectorRegistry

from bkclient import BookKeeper, BookKeeperAdmin, NoSuchLedgerError
from bkmeta.underreplication import UnderreplicationIndex
from bookie.config import AutoRecoverySettings
from bookie.tasks import cancel_and_wait

from .checks import LedgerChecker, rack_shortfalls
from .leader import LeaderElection
from .lost_bookies import LostBookieClock
from .stats import AutoRecoveryStats
from .switches import SwitchReader
from .worker import ReplicationWorker

log = logging.getLogger(__name__)

MIN_CHECK_GAP_S = 1.0  # a burst of bookie changes is one check, not one per change
_IDLE_WAIT_S = 3600.0  # periodic checks off and nothing pending: only changes wake it
_LEADER_ERROR_PAUSE_S = 5.0
_DISABLED_LEDGER_CHECK_RETRY_S = 60.0  # a ledger check skipped while disabled is tried again then


class AutoRecovery:
    """``start()``/``close()`` own the election, the leader's auditor and this process's
    replication workers; ``bk`` is the caller's."""

    def __init__(
        self,
        bk: BookKeeper,
        settings: AutoRecoverySettings,
        identity: str,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._bk = bk
        self._settings = settings
        meta = bk.ctx.metadata
        self._election = LeaderElection(meta.zk, meta.layout.auditor_leader, identity)
        self._control = meta.replication_control
        self.index = UnderreplicationIndex(meta.zk, meta.layout, identity)
        # Wakes the leader's loop: a change of the registered bookies or of an operator's switch.
        self._wake = asyncio.Event()
        self._switches = SwitchReader(meta.zk, self._control, settings.lost_bookie_delay_s, self._wake.set)
        self._admin = BookKeeperAdmin(bk, replication_rate_bytes=settings.replication_rate_bytes)
        self._lost = LostBookieClock()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = AutoRecoveryStats(registry or CollectorRegistry())
        self._work_ready = asyncio.Event()  # the auditor marked something: wake the local workers
        self.workers = [
            ReplicationWorker(bk, self._admin, self.index, settings, self.stats, f"{identity}/worker-{n}",
                              self._work_ready)
            for n in range(settings.replication_workers)
        ]
        self.ledger_checker = LedgerChecker(bk, settings.ledger_check_entries_per_s)

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    async def start(self) -> None:
        await self._election.start()
        self._tasks = [asyncio.create_task(self._run(), name="autorecovery")]
        self._tasks += [asyncio.create_task(w.run(), name=f"replication-worker-{n}")
                        for n, w in enumerate(self.workers)]

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
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
                self._switches.new_term()
            work = asyncio.create_task(self._lead())
            checks = asyncio.create_task(self._periodic_checks())
            lost = asyncio.create_task(self._election.lost())
            self.stats.leader.set(1)
            try:
                await asyncio.wait({work, checks, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.stats.leader.set(0)
                for task in (work, checks, lost):
                    task.cancel()
                await asyncio.gather(work, checks, lost, return_exceptions=True)
            failed = [t for t in (work, checks)
                      if t.done() and not t.cancelled() and t.exception() is not None]
            for task in failed:
                log.error("autorecovery leader loop failed: %r; starting over", task.exception())
            if failed:
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
        """One bookie check; returns the seconds until the next one is due without a bookie change."""
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
            short: dict[int, set[str]] = {}
            for bookie_id in due:
                for ledger_id in named[bookie_id]:
                    short.setdefault(ledger_id, set()).add(bookie_id)
            if await self._mark(short):
                log.warning("bookies lost: %s; re-replicating their ledgers", ", ".join(sorted(due)))
        self.stats.checks.inc()
        self.stats.lost_bookies.set(len(missing))
        self.stats.under_replicated.set(len(await self.index.ledger_ids()))
        return max(0.1, min(wake)) if wake else _IDLE_WAIT_S

    async def _mark(self, short: dict[int, set[str]]) -> int:
        """Mark each ledger with the bookies it is short of; returns the marks new or extended."""
        marked = 0
        for ledger_id, bookies in sorted(short.items()):
            if await self.index.mark(ledger_id, frozenset(bookies)):
                marked += 1
        if marked:
            self.stats.marked.inc(marked)
            self._work_ready.set()
        return marked

    async def _periodic_checks(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._ledger_checks())
            group.create_task(self._placement_checks())

    async def _placement_checks(self) -> None:
        """Every ``auditorPeriodicPlacementPolicyCheckInterval`` under the rack-aware policy:
        count the ledgers with a write quorum on too few racks (BookKeeper reports them and,
        by default, leaves them as they are: moving data to fix placement is the operator's
        call, ``pybk shell recover`` on the crowded bookie)."""
        settings = self._settings
        interval = settings.placement_check_interval_s
        if interval <= 0 or settings.placement_policy != "rackaware":
            await asyncio.Event().wait()  # off: wait for the leadership to end
        bk = self._bk
        while True:
            racks = {b: info.rack for b, info in bk.ctx.bookie_watcher.all_bookies().items()}
            short = 0
            for ledger_id in await bk.list_ledgers():
                with contextlib.suppress(NoSuchLedgerError):
                    md = await bk.ledger_metadata(ledger_id)
                    segments = rack_shortfalls(md, racks, settings.min_racks_per_write_quorum)
                    if segments:
                        short += 1
                        log.warning("placement check: ledger %d has write quorums on fewer than %d"
                                    " racks (segments at entries %s)", ledger_id,
                                    settings.min_racks_per_write_quorum, segments)
            self.stats.placement_short.set(short)
            await asyncio.sleep(interval)

    async def _ledger_checks(self) -> None:
        """The periodic ledger check, while leading (see the module's docstring)."""
        interval = self._settings.ledger_check_interval_s
        if interval <= 0:
            await asyncio.Event().wait()  # off: wait for the leadership to end
        while True:
            last_ms = await self.index.check_all_ledgers_ctime()
            due_in = 0.0 if last_ms is None else last_ms / 1000 + interval - time.time()
            if due_in > 0:
                await asyncio.sleep(min(due_in, interval))
                continue
            if not await self._control.is_enabled():
                log.info("ledger re-replication disabled: ledger check skipped")
                await asyncio.sleep(min(interval, _DISABLED_LEDGER_CHECK_RETRY_S))
                continue
            started = time.monotonic()
            result = await self.ledger_checker.run()
            took = time.monotonic() - started
            await self._mark(result.short)
            await self.index.set_check_all_ledgers_ctime(int(time.time() * 1000))
            stats = self.stats
            stats.check_all_ledgers_time.observe(took)
            stats.ledgers_checked.inc(result.ledgers_checked)
            stats.entries_checked.inc(result.entries_checked)
            stats.missing_entries.inc(result.missing_entries)
            log.info("ledger check: %d ledgers, %d entries compared in %.2f s (%.0f entries/s); %d ledgers"
                     " short of %d entries; %d bookie answers missing", result.ledgers_checked,
                     result.entries_checked, took, result.entries_checked / took if took > 0 else 0.0,
                     len(result.short), result.missing_entries, result.unchecked)
