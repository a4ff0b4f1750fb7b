"""The operator's switches as the leading autorecovery reads them (:mod:`bkmeta.replication_control`):
whether re-replication is enabled, and the cluster's lostBookieRecoveryDelay, watched so that a
change wakes the leader at once.

A write to the delay znode means what it means to BookKeeper's auditor:

- the same value again (``pybk shell triggeraudit`` does that) or 0: audit now, every lost bookie
  is re-replicated without waiting;
- another value: the bookies still waiting wait the new delay, counted from the change.

A write is taken into account only once the check that read it has applied it
(:meth:`SwitchReader.applied`): a check that fails halfway reads it again next time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import NamedTuple

from bkmeta import CorruptReplicationSettingError, ReplicationControl
from bkmeta.store import EventType, MetadataStore, WatchEvent

log = logging.getLogger(__name__)

# Kazoo also calls every watcher with a NONE event when the connection drops: no one wrote.
_WRITES = frozenset({EventType.CREATED, EventType.CHANGED, EventType.DELETED})


class Switches(NamedTuple):
    enabled: bool  # re-replication allowed
    delay_s: float  # the lostBookieRecoveryDelay in force
    audit_now: bool  # the delay was written with its own value, or 0: no more waiting
    delay_changed: bool  # a new delay was written: waiting bookies count it from now
    delay: int | None  # the cluster's value as read (None: unset or unreadable)
    writes_seen: int  # for applied()


class SwitchReader:
    """Reads the switches for the leader; ``wake`` runs (on the loop) when one is written."""

    def __init__(
        self,
        zk: MetadataStore,
        control: ReplicationControl,
        configured_delay_s: float,
        wake: Callable[[], None],
    ) -> None:
        self._control = control
        self._configured_delay_s = configured_delay_s
        self._wake = wake
        # One watcher object per znode, passed on every read: kazoo keeps it once per path, and
        # ZooKeeper one watch per path and session, however many reads set it again.
        self._disable_watch = zk.wrap_watcher(self._disable_written)
        self._delay_watch = zk.wrap_watcher(self._delay_written)
        self._delay_writes = 0  # seen by the watch
        self._delay_writes_applied = 0
        self._delay_before: int | None = None  # the value the last applied check read
        self._seeded = False
        self._said_disabled = False

    def _disable_written(self, event: WatchEvent) -> None:
        if event.type in _WRITES:
            self._wake()

    def _delay_written(self, event: WatchEvent) -> None:
        if event.type in _WRITES:
            self._delay_writes += 1
            self._wake()

    def new_term(self) -> None:
        """A new leader term: what the last one saw says nothing about this one."""
        self._delay_before = None
        self._delay_writes_applied = self._delay_writes
        self._seeded = False

    async def read(self) -> Switches:
        control = self._control
        if not self._seeded:  # write the configured delay if the cluster has none yet
            if await control.initialize_lost_bookie_delay(int(self._configured_delay_s)):
                log.info("cluster lostBookieRecoveryDelay set to %g s from the configuration",
                         self._configured_delay_s)
            # what a write of the same value is compared with (BookKeeper's auditor reads it at start)
            with contextlib.suppress(CorruptReplicationSettingError):
                self._delay_before = await control.lost_bookie_delay()
            self._seeded = True
        enabled = await control.is_enabled(self._disable_watch)
        writes = self._delay_writes
        try:
            delay = await control.lost_bookie_delay(self._delay_watch)
        except CorruptReplicationSettingError as exc:
            log.warning("%s; using the configured lostBookieRecoveryDelay", exc)
            delay = None
        audit_now = changed = False
        if writes > self._delay_writes_applied and delay is not None:
            audit_now = delay in (0, self._delay_before)
            changed = not audit_now
        if enabled == self._said_disabled:
            self._said_disabled = not enabled
            if enabled:
                log.info("ledger re-replication enabled")
            else:
                log.warning("ledger re-replication is disabled (pybk shell autorecovery --enable"
                            " resumes it): lost bookies are watched, nothing is copied")
        delay_s = float(delay) if delay is not None else self._configured_delay_s
        return Switches(enabled, delay_s, audit_now, changed, delay, writes)

    def applied(self, switches: Switches) -> None:
        """The check that read ``switches`` acted on them."""
        if switches.audit_now:
            log.info("lostBookieRecoveryDelay written with %s: re-replicating lost bookies now",
                     "0" if switches.delay == 0 else "its own value")
        elif switches.delay_changed:
            log.info("lostBookieRecoveryDelay changed to %d s: bookies still waiting wait that"
                     " long from now", switches.delay)
        self._delay_writes_applied = switches.writes_seen
        if switches.delay is not None:
            self._delay_before = switches.delay
