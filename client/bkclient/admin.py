"""Re-replication of lost bookies' data (BookKeeper's ``BookKeeperAdmin.recoverBookieData``, run by
``bookkeeper shell recover``; here ``pybk shell recover``).

For every ledger that names a lost bookie, each segment holding it is copied to a new bookie
and the metadata swapped (:mod:`bkclient.ops.replicate`), so every entry is on Qw live bookies
again. Which ledgers need what:

- a closed ledger: every segment naming a lost bookie, the last one up to the last entry;
- an open ledger whose last segment names a lost bookie: the writer may still be adding there,
  so, as BookKeeper does, the ledger is first fenced and closed (opened with recovery); a live
  writer then gets LedgerFencedError. ``skip_open_ledgers`` leaves every open ledger alone;
- an open ledger whose last segment is clean (its writer already replaced the bookie): the
  earlier segments are copied and the writer carries on; its next ensemble change re-reads the
  metadata the copy changed (CAS).

The password and digest type come from the ledger's metadata, as in BookKeeper.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from bkclient.bookkeeper import BookKeeper
from bkclient.digest import DigestManager
from bkclient.ops.replicate import Fragment, FragmentReplicator, fragments_with
from bkclient.rate_limiter import ByteRateLimiter
from bkmeta.model import LedgerMetadata
from bkmeta.serde import CorruptLedgerMetadataError
from bkproto.errors import BKError, IllegalOpError, IncorrectParameterError, NoSuchLedgerError

log = logging.getLogger(__name__)


def check_bookie_id(bookie_id: str) -> None:
    """Raise IncorrectParameterError unless ``bookie_id`` is ``host:port``."""
    host, _, port = bookie_id.rpartition(":")
    if not host or not port.isdigit():
        raise IncorrectParameterError(f"bookie id {bookie_id!r} is not host:port")


class SkipReason(enum.Enum):
    """Why a ledger naming a lost bookie was left alone (:attr:`LedgerRecovery.skipped`)."""

    OPEN_LEDGER = "open ledger (skip_open_ledgers)"
    WRITER_MAY_REPLACE = "open, its writer may still replace the lost bookie (fence_open_ledgers off)"


@dataclass(frozen=True)
class FragmentPlan:
    """One segment's entries and its ensemble before and after (``new`` is None when no bookie
    could be found for it). ``last_entry_id`` is None in a dry run's plan for the last segment of
    a ledger that would be fenced: where it ends is what the recovery will find."""

    first_entry_id: int
    last_entry_id: int | None
    old: tuple[str, ...]
    new: tuple[str, ...] | None


@dataclass
class LedgerRecovery:
    """What happened to one ledger that named a lost bookie."""

    ledger_id: int
    fenced: bool = False  # it was open with a lost bookie in its last segment: fenced and closed
    fragments: list[FragmentPlan] = field(default_factory=list)
    entries_copied: int = 0
    skipped: SkipReason | None = None  # why nothing was done
    error: str | None = None  # why it is not (fully) re-replicated; run the tool again

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Decommission:
    """What :meth:`BookKeeperAdmin.decommission_bookie` did."""

    bookie_id: str
    ledgers: list[LedgerRecovery]
    cookie_deleted: bool  # only once no ledger names the bookie any more


class BookKeeperAdmin:
    """Cluster administration over a connected :class:`BookKeeper` (which the caller closes)."""

    def __init__(self, bk: BookKeeper, *, replication_rate_bytes: int = 0) -> None:
        """``replication_rate_bytes`` > 0 caps what re-replication writes, in bytes per second
        over all copies (BookKeeper's ``replicationRateByBytes``; 0 or less: no cap)."""
        if isinstance(replication_rate_bytes, bool) or not isinstance(replication_rate_bytes, int):
            raise IncorrectParameterError(
                f"replication_rate_bytes must be an int, got {replication_rate_bytes!r}"
            )
        self._bk = bk
        self._throttle = (
            ByteRateLimiter(replication_rate_bytes, clock=bk.ctx.clock.monotonic)
            if replication_rate_bytes > 0
            else None
        )

    @property
    def throttle(self) -> ByteRateLimiter | None:
        """The re-replication byte rate limit (None: none), for other copiers to share it."""
        return self._throttle

    async def recover_bookies(
        self,
        lost: Collection[str],
        *,
        ledger_ids: Collection[int] | None = None,
        dry_run: bool = False,
        skip_open_ledgers: bool = False,
        fence_open_ledgers: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[LedgerRecovery]:
        """Re-replicate the data of the ``lost`` bookies (ids ``host:port``), in every ledger or
        in ``ledger_ids``; returns one report per ledger that named one of them. With
        ``dry_run`` nothing is copied, fenced or changed: the reports give the plan. Without
        ``fence_open_ledgers``, an open ledger still writing to a lost bookie is skipped (its
        writer may yet replace it; autorecovery's grace period). ``progress(done, total)`` is
        called after each ledger looked at (a progress bar of the shell's)."""
        lost_set = frozenset(lost)
        if not lost_set:
            raise IncorrectParameterError("name at least one bookie to recover")
        for bookie_id in lost_set:
            check_bookie_id(bookie_id)
        ids = sorted(ledger_ids) if ledger_ids is not None else await self._bk.list_ledgers()
        reports = []
        for done, ledger_id in enumerate(ids, 1):
            report = await self.recover_ledger(ledger_id, lost_set, dry_run=dry_run,
                                               skip_open_ledgers=skip_open_ledgers,
                                               fence_open_ledgers=fence_open_ledgers)
            if report is not None:
                reports.append(report)
            if progress is not None:
                progress(done, len(ids))
        return reports

    # -- audit (what BookKeeper's auditor finds) ------------------------------------------------

    async def ledgers_by_bookie(self) -> dict[str, set[int]]:
        """Every bookie some ledger's metadata names, with those ledgers (reads every ledger's
        metadata once)."""
        bk = self._bk
        named: dict[str, set[int]] = {}
        for ledger_id in await bk.list_ledgers():
            try:
                bookies = (await bk.ledger_metadata(ledger_id)).all_bookies()
            except NoSuchLedgerError:
                continue  # deleted since listed
            except CorruptLedgerMetadataError as exc:  # one bad znode must not hide the others
                log.warning("ledger %d skipped: %s", ledger_id, exc)
                continue
            for bookie_id in bookies:
                named.setdefault(bookie_id, set()).add(ledger_id)
        return named

    async def unregistered(self, bookie_ids: Collection[str]) -> set[str]:
        """Those of ``bookie_ids`` registered neither as writable nor as read-only. The watcher's
        cached view only shortlists them; ZooKeeper itself decides (``is_registered``), so a
        registration the watcher has not caught up with does not make a bookie look lost."""
        watcher = self._bk.ctx.bookie_watcher
        shortlist = set(bookie_ids) - set(watcher.all_bookies())
        return {bookie_id for bookie_id in shortlist if not await watcher.is_registered(bookie_id)}

    async def underreplicated_ledgers(self) -> dict[int, set[str]]:
        """Each ledger whose metadata names a bookie that is not registered, with those bookies:
        the ledgers autorecovery (or ``recover``) would re-replicate."""
        named = await self.ledgers_by_bookie()
        ledgers: dict[int, set[str]] = {}
        for bookie_id in sorted(await self.unregistered(named)):
            for ledger_id in named[bookie_id]:
                ledgers.setdefault(ledger_id, set()).add(bookie_id)
        return ledgers

    async def decommission_bookie(
        self, bookie_id: str, progress: Callable[[int, int], None] | None = None
    ) -> Decommission:
        """BookKeeper's decommissionbookie: re-replicate everything a stopped bookie held (open
        ledgers writing to it are fenced), then delete its cookie, so that nothing names the id
        and its old directories cannot rejoin the cluster (their cookie no longer matches).
        Refused with IllegalOpError while the bookie is registered: stop it first."""
        check_bookie_id(bookie_id)
        if await self._bk.ctx.bookie_watcher.is_registered(bookie_id):
            raise IllegalOpError(f"bookie {bookie_id} is still registered: stop it before decommissioning it")
        reports = await self.recover_bookies([bookie_id], progress=progress)
        if any(not r.ok or r.skipped is not None for r in reports):
            return Decommission(bookie_id, reports, cookie_deleted=False)
        await self._bk.ctx.metadata.cookies.delete(bookie_id)  # absent: deleted by an earlier run
        log.info("bookie %s decommissioned: its ledgers are re-replicated and its cookie deleted", bookie_id)
        return Decommission(bookie_id, reports, cookie_deleted=True)

    async def recover_ledger(
        self,
        ledger_id: int,
        lost: frozenset[str],
        *,
        dry_run: bool = False,
        skip_open_ledgers: bool = False,
        fence_open_ledgers: bool = True,
    ) -> LedgerRecovery | None:
        """One ledger; None when it names none of the ``lost`` bookies (or was deleted)."""
        bk = self._bk
        try:
            md = await bk.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return None  # deleted since it was listed: nothing left to protect
        except BKError as exc:  # say, ZooKeeper trouble: this ledger fails, the others go on
            return LedgerRecovery(ledger_id, error=f"{type(exc).__name__}: {exc}")
        if lost.isdisjoint(md.all_bookies()):
            return None
        report = LedgerRecovery(ledger_id)
        try:
            if not md.is_closed:
                if skip_open_ledgers:
                    report.skipped = SkipReason.OPEN_LEDGER
                    return report
                if not lost.isdisjoint(md.last_ensemble):
                    if not fence_open_ledgers:
                        report.skipped = SkipReason.WRITER_MAY_REPLACE
                        return report
                    report.fenced = True
                    if not dry_run:
                        log.info("ledger %d: open, a lost bookie in its last segment: fencing it", ledger_id)
                        handle = await bk.open_ledger(ledger_id, md.password, recovery=True)
                        await handle.close()
                        md = handle.metadata
            await self._recover_fragments(md, ledger_id, lost, dry_run, report)
        except NoSuchLedgerError:
            log.info("ledger %d: deleted while being re-replicated", ledger_id)
            return None
        except BKError as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            log.warning("ledger %d: not re-replicated: %s", ledger_id, report.error)
        return report

    async def _recover_fragments(
        self, md: LedgerMetadata, ledger_id: int, lost: frozenset[str], dry_run: bool, report: LedgerRecovery
    ) -> None:
        ctx = self._bk.ctx
        digest = DigestManager(ledger_id, md.password, md.digest_type)
        # Still open here: its last segment is clean, or this is a dry run that did not fence it
        # (then that segment's end is unknown until recovery).
        last_entry = md.last_entry_id if md.is_closed else -1
        last_first = md.segments[-1].first_entry_id
        first_error: BKError | None = None
        for fragment in fragments_with(md, ledger_id, lost, last_entry):
            unknown_end = not md.is_closed and fragment.first_entry_id == last_first
            end = None if unknown_end else fragment.last_entry_id
            try:
                targets = self._targets(md, fragment, lost)
            except BKError as exc:
                report.fragments.append(FragmentPlan(fragment.first_entry_id, end, fragment.ensemble, None))
                first_error = first_error or exc
                continue
            new = tuple(targets.get(i, bookie) for i, bookie in enumerate(fragment.ensemble))
            report.fragments.append(FragmentPlan(fragment.first_entry_id, end, fragment.ensemble, new))
            if dry_run:
                continue
            replicator = FragmentReplicator(ctx, digest, md, fragment, targets, self._throttle)
            try:
                await replicator.run()
            except BKError as exc:
                first_error = first_error or exc
            report.entries_copied += replicator.entries_copied
        if first_error is not None:
            raise first_error

    def _targets(self, md: LedgerMetadata, fragment: Fragment, lost: frozenset[str]) -> Mapping[int, str]:
        """A new bookie for each lost slot: writable, not in the segment, not lost, and not
        given to another slot of it."""
        ctx = self._bk.ctx
        racks = ctx.writable_bookie_racks()
        ensemble = list(fragment.ensemble)
        targets: dict[int, str] = {}
        for slot in fragment.lost_slots:
            targets[slot] = ctx.placement.replace_bookie(ensemble, slot, md.write_quorum_size, racks,
                                                         lost | set(ensemble))
            ensemble[slot] = targets[slot]  # so the next slot's choice sees it (racks, no repeats)
        return targets
