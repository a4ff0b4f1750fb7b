"""Ledger recovery: fence the writer out and close the ledger at exactly the right entry.

BookKeeper's algorithm (reference §1.6), step by step:

1. CAS the metadata OPEN -> IN_RECOVERY (a CLOSED ledger needs nothing; IN_RECOVERY means another
   reader started and maybe died: recover anyway). From then on the writer cannot change the
   ensemble: its metadata CAS sees IN_RECOVERY and it gives up with LedgerFencedError.
2. Fence the last ensemble: read entry -1 with the master key from every bookie. A fenced bookie
   refuses ordinary adds, so the writer cannot get new entries acknowledged. Wait until the answers
   cover every write quorum; the highest LAC seen (at least the first entry of the last segment - 1)
   is the starting point: every entry up to it is known to be acknowledged.
3. Read LAC+1, LAC+2, ... from their write sets. A found entry may have been acknowledged, so it is
   re-added (RECOVERY_ADD, allowed on fenced bookies, same body byte for byte) to its write set
   until Qa bookies hold it. The first entry that enough replicas say they do not have
   (``coverage.provably_absent``) was never acknowledged: it and everything after it do not exist.
4. CAS IN_RECOVERY -> CLOSED with the last recovered entry and its cumulative length.

If a replica of the last ensemble is down, the re-adds of step 3 cannot reach Qa there; the bookie is
replaced like a writer would: a new segment from the first entry not yet recovered (the recovery's
own LAC+1), and the re-adds go to the new ensemble. Unlike a writer's, recovery's segments are kept
in memory and written only by the CAS of step 4, together with CLOSED (BookKeeper's
``newEnsemblesFromRecovery``; reference simulation.md §5): a recoverer that dies before closing
leaves the IN_RECOVERY metadata naming exactly the bookies the writer wrote to. Had it written its
replacement there, the next recoverer would fence and read the replacement as if the writer had
written to it, and its "no such entry" (it holds only what the dead recoverer gave it) could prove
an acknowledged entry absent. The close's CAS refuses metadata whose ensembles another client
changed meanwhile: the entries re-added here are on the write sets of our segments only.
Like the writer's acks, a re-add's acks count only for bookies our segments name for the entry as
they stand now: a bookie replaced while its re-add was in flight may still answer (a paused process
resuming), and its copy is not where readers will look. Entries are recovered strictly in order, so
a later replacement never changes the write set of a recovered entry.
Reads, fencing and the decision that an entry is absent always use the ensembles the writer wrote to
(the metadata as marked IN_RECOVERY): a replacement holds only what recovery gave it, so its "no
such entry" proves nothing.

Metadata left IN_RECOVERY by a recoverer of an earlier version of this module (which wrote its
replacements at once) names a segment after the writer's that nothing tells apart from one the
writer added. It is taken as the writer's (as BookKeeper's recovery takes whatever metadata it
finds): the starting point is at least that segment's first entry - 1 (apache/bookkeeper#2654),
which holds (that recoverer started the segment at its first entry not yet on Qa bookies); but
entries from there on are read from the segment's bookies, where its replacement's "no such
entry" counts even for an entry it never got. Such a ledger can still close before acknowledged
entries; new metadata never has such a segment.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bkclient.coverage import provably_absent
from bkclient.digest import DigestManager
from bkclient.ops.read import ReadContext, discard_tasks, is_absent, write_set_bookies
from bkclient.ops.read_lac import ReadLastConfirmedOp
from bkclient.placement import BookieRacks, PlacementPolicy
from bkmeta.ledger_manager import LedgerWatcher
from bkmeta.model import LedgerMetadata, LedgerState, Versioned
from bkmeta.update_loop import MetadataUpdateLoop
from bkproto.entry_format import NO_ENTRY
from bkproto.errors import (
    BKError,
    DigestMismatchError,
    LedgerRecoveryError,
    UnauthorizedAccessError,
)

log = logging.getLogger(__name__)

_RECOVERY_READS_IN_FLIGHT = 8  # entries read ahead while earlier ones are being re-added
_MAX_ENSEMBLE_CHANGES = 16  # per recovery: more means bookies keep failing, give up and retry later


class LedgerMetadataStore(Protocol):
    """The ledger manager calls the read path uses (``bkmeta.ledger_manager.LedgerManager``)."""

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]: ...

    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]: ...

    def watch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None: ...

    def unwatch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None: ...


async def recovery_add(
    ctx: ReadContext, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes
) -> None:
    """One RECOVERY_ADD (taken by a fenced bookie too), acknowledged within the client's add
    timeout or ``TimeoutError``: the bookie client itself never gives up on an add."""
    add = ctx.bookie(bookie_id).add(ledger_id, entry_id, master_key, body, recovery=True)
    await asyncio.wait_for(add, ctx.config.add_entry_timeout_s)


class RecoveryContext(ReadContext, Protocol):
    @property
    def ledger_manager(self) -> LedgerMetadataStore: ...

    @property
    def placement(self) -> PlacementPolicy: ...

    def writable_bookie_racks(self) -> BookieRacks: ...


@dataclass(frozen=True, slots=True)
class FoundEntry:
    entry_id: int
    body: bytes  # exactly as the writer sent it: re-added unchanged
    length: int  # cumulative ledger length up to and including this entry


class RecoveryReadOp:
    """Ask the whole write set of one entry at once. Returns the entry as soon as one replica
    serves a body that verifies, ``None`` once enough replicas said "no such entry" to prove it
    was never acknowledged, and raises when neither can be decided."""

    def __init__(
        self, ctx: ReadContext, ledger_id: int, metadata: LedgerMetadata, digest: DigestManager, entry_id: int
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digest = digest
        self._entry_id = entry_id

    async def run(self) -> FoundEntry | None:
        md = self._metadata
        timeout = self._ctx.config.read_entry_timeout_s
        replicas = write_set_bookies(md, self._entry_id)
        tasks = {
            asyncio.ensure_future(
                self._ctx.bookie(b).read_entry(self._ledger_id, self._entry_id, timeout=timeout)
            ): b
            for b in replicas
        }
        missing = 0
        errors: list[BKError] = []
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    error = task.exception()
                    if error is None:
                        body = task.result().body
                        try:
                            verified = self._digest.verify_entry(self._entry_id, body)
                        except DigestMismatchError as exc:
                            log.warning("recovery: bookie %s holds a corrupt copy: %s", tasks[task], exc)
                            errors.append(exc)
                            continue
                        return FoundEntry(self._entry_id, body, verified.length)
                    if not isinstance(error, BKError):
                        raise error
                    if isinstance(error, UnauthorizedAccessError):
                        raise error
                    if is_absent(error):
                        missing += 1
                        if provably_absent(missing, md.write_quorum_size, md.ack_quorum_size):
                            return None
                    else:
                        errors.append(error)
        finally:
            discard_tasks(tasks)
        detail = "; ".join(str(e) for e in errors)
        raise LedgerRecoveryError(
            f"ledger {self._ledger_id}: cannot tell whether entry {self._entry_id} exists "
            f"({missing} replicas lack it): {detail}"
        )


class LedgerRecoveryOp:
    """Fence and close a ledger another client was writing; returns the CLOSED metadata."""

    def __init__(self, ctx: RecoveryContext, ledger_id: int, password: bytes, digest: DigestManager) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._password = password
        self._digest = digest
        self._versioned: Versioned[LedgerMetadata] | None = None  # as marked IN_RECOVERY: the close's token
        self._written: LedgerMetadata | None = None  # as fenced: where the writer's entries are
        # The writer's segments and this recovery's replacements: where re-adds go. Only the close
        # writes the replacements (``_replacements``, replayed over the metadata it closes).
        self._local: LedgerMetadata | None = None
        self._replacements: list[tuple[int, tuple[str, ...]]] = []  # (first entry, ensemble)
        # The first entry not yet on Qa bookies of its write set (every one before it is): a
        # replacement's segment starts here, so a recovered entry's write set never changes.
        self._recovery_start = 0
        self._change_lock = asyncio.Lock()
        # Re-adds that reached Qa and wait for their turn (the entry before them recovered) or a
        # replacement (their write set may have moved), by entry id; changed under the lock.
        self._turns: dict[int, asyncio.Future[None]] = {}
        self.recovered_entries = 0  # entries re-added (observability, tests)
        self.ensemble_changes = 0

    async def run(self) -> Versioned[LedgerMetadata]:
        versioned = await self._mark_in_recovery()
        if versioned.value.is_closed:
            return versioned
        self._versioned = versioned
        md = self._written = self._local = versioned.value
        lac = await ReadLastConfirmedOp(self._ctx, self._ledger_id, md, self._digest, fence=True).run()
        lac = max(lac, md.segments[-1].first_entry_id - 1)
        log.info("recovering ledger %d from LAC %d", self._ledger_id, lac)
        self._recovery_start = lac + 1
        last, length = await self._recover_from(lac)
        return await self._close(last, length)

    # -- step 1 ----------------------------------------------------------------------------------

    async def _mark_in_recovery(self) -> Versioned[LedgerMetadata]:
        # CLOSED: done; IN_RECOVERY: someone began, finish it. A conflict (the writer changed
        # the ensemble or closed meanwhile) re-reads and looks again.
        return await MetadataUpdateLoop(
            self._ctx.ledger_manager,
            self._ledger_id,
            needs_transformation=lambda md: md.state == LedgerState.OPEN,
            transform=lambda md: md.with_state(LedgerState.IN_RECOVERY),
        ).run()

    # -- step 3 ----------------------------------------------------------------------------------

    def _metadata(self) -> LedgerMetadata:
        """The writer's segments and this recovery's own replacements: where re-adds go."""
        assert self._local is not None
        return self._local

    def _writer_metadata(self) -> LedgerMetadata:
        assert self._written is not None
        return self._written

    async def _recover_from(self, lac: int) -> tuple[int, int]:
        """Re-add every entry after ``lac`` that exists; (last entry id, ledger length)."""
        reads: deque[asyncio.Task[FoundEntry | None]] = deque()
        adds: list[asyncio.Task[None]] = []
        next_read = lac + 1
        last, length = lac, -1
        try:
            while True:
                while len(reads) < _RECOVERY_READS_IN_FLIGHT:
                    op = RecoveryReadOp(
                        self._ctx, self._ledger_id, self._writer_metadata(), self._digest, next_read
                    )
                    reads.append(asyncio.ensure_future(op.run()))
                    next_read += 1
                found = await reads.popleft()
                if found is None:
                    break
                adds.append(asyncio.ensure_future(self._re_add(found)))
                last, length = found.entry_id, found.length
            discard_tasks(reads)
            reads.clear()
            await asyncio.gather(*adds)
        finally:
            discard_tasks(reads)
            discard_tasks(adds)
        self.recovered_entries = len(adds)
        if length < 0:
            length = await self._length_at(lac)
        return last, length

    async def _length_at(self, entry_id: int) -> int:
        """Cumulative length at an entry known to be acknowledged (0 before the first)."""
        if entry_id == NO_ENTRY:
            return 0
        found = await RecoveryReadOp(
            self._ctx, self._ledger_id, self._writer_metadata(), self._digest, entry_id
        ).run()
        if found is None:
            raise LedgerRecoveryError(
                f"ledger {self._ledger_id}: entry {entry_id} is acknowledged but no replica has it"
            )
        return found.length

    async def _re_add(self, found: FoundEntry) -> None:
        """RECOVERY_ADD the entry to its write set until Qa bookies of it hold it, replacing bookies
        that fail or do not answer in time.

        The acks are judged against our segments as they stand, under the change lock (which
        replacements take too): a bookie replaced while its re-add was in flight may answer
        afterwards, and its copy does not count. The entry counts as recovered only
        once every entry before it is (see ``_recovery_start``); until then a replacement can
        still move it to a new write set, and it is re-added there."""
        entry_id = found.entry_id
        rounds = 0
        acked: set[str] = set()
        while True:
            async with self._change_lock:
                md = self._metadata()
                replicas = write_set_bookies(md, entry_id)
                acked &= set(replicas)  # a replaced bookie's copy no longer counts
                enough = len(acked) >= md.ack_quorum_size
                if enough and self._recovery_start == entry_id:
                    self._recovery_start = entry_id + 1
                    self._wake(entry_id + 1)
                    return
                if enough:
                    turn = self._turns[entry_id] = asyncio.get_running_loop().create_future()
            if enough:
                await turn
                continue
            rounds += 1
            if rounds > _MAX_ENSEMBLE_CHANGES + 1:
                raise LedgerRecoveryError(
                    f"ledger {self._ledger_id}: entry {entry_id} reached {len(acked)} of "
                    f"{md.ack_quorum_size} bookies of its write set after {rounds - 1} rounds of re-adds"
                )
            targets = [b for b in replicas if b not in acked]
            results = await asyncio.gather(
                *(recovery_add(self._ctx, b, self._ledger_id, entry_id, self._digest.master_key,
                               found.body)
                  for b in targets),
                return_exceptions=True,
            )
            failed: list[str] = []
            for bookie_id, result in zip(targets, results, strict=True):
                if result is None:
                    acked.add(bookie_id)
                elif isinstance(result, UnauthorizedAccessError):
                    raise result
                elif isinstance(result, BKError | asyncio.TimeoutError):
                    log.warning(
                        "recovery add of %d:%d to %s failed: %r",
                        self._ledger_id,
                        entry_id,
                        bookie_id,
                        result,
                    )
                    failed.append(bookie_id)
                else:
                    raise result
            if failed:
                await self._replace_bookies(failed)
                async with self._change_lock:  # the waiting entries' write sets may have moved
                    for waiting in list(self._turns):
                        self._wake(waiting)

    def _wake(self, entry_id: int) -> None:
        turn = self._turns.pop(entry_id, None)
        if turn is not None and not turn.done():
            turn.set_result(None)

    async def _replace_bookies(self, failed: Sequence[str]) -> None:
        """Swap the failed bookies out of our last ensemble, in a segment starting at the first
        entry not yet recovered (BookKeeper's LAC+1 rule: every entry before it is on Qa bookies
        of its write set). The segment is kept here; the close writes it (module docstring)."""
        async with self._change_lock:  # concurrent re-adds of other entries may see the same failure
            md = self._metadata()
            ensemble = list(md.last_ensemble)
            todo = [b for b in failed if b in ensemble]  # another re-add may have replaced it already
            if not todo:
                return
            exclude = set(failed)
            for bookie_id in todo:
                index = ensemble.index(bookie_id)
                ensemble[index] = self._ctx.placement.replace_bookie(
                    ensemble, index, md.write_quorum_size, self._ctx.writable_bookie_racks(), exclude
                )
            change = (self._recovery_start, tuple(ensemble))
            self._local = md.with_ensemble_change(*change)
            self._replacements.append(change)
            self.ensemble_changes += 1
            log.info(
                "recovery of ledger %d: ensemble from entry %d is now %s (written when it closes)",
                self._ledger_id,
                self._recovery_start,
                ensemble,
            )

    # -- step 4 ----------------------------------------------------------------------------------

    async def _close(self, last_entry_id: int, length: int) -> Versioned[LedgerMetadata]:
        assert self._versioned is not None

        def needs_closing(md: LedgerMetadata) -> bool:
            if md.is_closed:
                return False  # another recoverer closed it first; its result stands
            if md.state != LedgerState.IN_RECOVERY:
                raise LedgerRecoveryError(f"ledger {self._ledger_id}: state {md.state.name} during recovery")
            if md.segments != self._writer_metadata().segments:
                # Another client changed them (re-replication, or a recoverer of an earlier version
                # that wrote its replacements at once): the entries re-added here are on the write
                # sets of our segments only, and theirs may name other bookies for them.
                raise LedgerRecoveryError(
                    f"ledger {self._ledger_id}: another client changed its ensembles during recovery;"
                    " open it again to retry"
                )
            return True

        def with_replacements_closed(md: LedgerMetadata) -> LedgerMetadata:
            for first_entry_id, ensemble in self._replacements:
                md = md.with_ensemble_change(first_entry_id, ensemble)
            return md.with_closed(last_entry_id, length)

        return await MetadataUpdateLoop(
            self._ctx.ledger_manager,
            self._ledger_id,
            needs_transformation=needs_closing,
            transform=with_replacements_closed,
            current=self._versioned,
        ).run()
