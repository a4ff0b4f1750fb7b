"""Re-replication of one ledger fragment: the entries a lost bookie held, copied to a new bookie,
then the bookie swapped in the ledger's metadata (BookKeeper's LedgerFragmentReplicator).

A fragment is one segment of the metadata with the slots of the lost bookies in it. For each entry
of the segment whose write set holds such a slot, the entry is read from the other replicas
(digest verified, in chunks: see :meth:`FragmentReplicator.copy`) and written to the slot's new
bookie as a RECOVERY_ADD, byte for byte as stored: the copy is identical to the lost one, and a
fenced bookie takes it. Only once every copy is
acknowledged (so durable on the new bookie) does the metadata name the new bookie, by CAS, so a
reader never goes to a bookie that lacks the entries it is named for.

A segment with no entry (a writer's ensemble change just before close) copies nothing; its
metadata is still updated, so the lost bookie drops out of the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bkclient.digest import DigestManager
from bkclient.distribution import RoundRobinDistribution
from bkclient.ops.read import ReadEntryOp
from bkclient.ops.recovery import RecoveryContext, recovery_add
from bkclient.rate_limiter import ByteRateLimiter
from bkmeta.model import LedgerMetadata, Versioned
from bkmeta.update_loop import MetadataUpdateLoop
from bkproto.errors import BKError, DigestMismatchError, LedgerRecoveryError
from bkproto.errors import TimeoutError as BKTimeoutError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fragment:
    """Entries ``first_entry_id..last_entry_id`` of one segment (none when last < first), and
    the slots in ``ensemble`` whose bookies are lost."""

    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    ensemble: tuple[str, ...]
    lost_slots: tuple[int, ...]

    @property
    def entry_count(self) -> int:
        return max(0, self.last_entry_id - self.first_entry_id + 1)


def fragments_with(
    md: LedgerMetadata, ledger_id: int, lost: frozenset[str], last_entry_id: int
) -> list[Fragment]:
    """The segments of ``md`` that name a bookie of ``lost``; the last one ends at
    ``last_entry_id`` (the ledger's last entry when it is closed)."""
    found = []
    segments = md.segments
    for index, segment in enumerate(segments):
        slots = tuple(i for i, bookie in enumerate(segment.bookies) if bookie in lost)
        if not slots:
            continue
        end = segments[index + 1].first_entry_id - 1 if index + 1 < len(segments) else last_entry_id
        found.append(Fragment(ledger_id, segment.first_entry_id, end, segment.bookies, slots))
    return found


class _ChunkSize:
    """How many entries a lane asks a bookie for at once. A bulk read that times out halves it for
    the rest of the lane: a slow bookie then serves smaller reads within the read timeout, where
    the full chunk would time out on every call. It never grows back, since every timeout costs a
    whole read timeout and a lane lasts one fragment."""

    __slots__ = ("entries",)

    def __init__(self, limit: int) -> None:
        self.entries = max(1, limit)

    def timed_out(self, asked: int) -> None:
        self.entries = max(1, min(self.entries, asked) // 2)


class FragmentReplicator:
    """Copies one fragment to ``targets`` (slot -> new bookie), then swaps them into the metadata."""

    def __init__(
        self,
        ctx: RecoveryContext,
        digest: DigestManager,
        md: LedgerMetadata,
        fragment: Fragment,
        targets: Mapping[int, str],
        throttle: ByteRateLimiter | None = None,
    ) -> None:
        if set(targets) != set(fragment.lost_slots):
            raise ValueError(f"targets {dict(targets)} do not cover the lost slots {fragment.lost_slots}")
        self._ctx = ctx
        self._digest = digest
        self._fragment = fragment
        self._targets = dict(targets)
        self._distribution = RoundRobinDistribution(
            md.ensemble_size, md.write_quorum_size, md.ack_quorum_size
        )
        self._lost = {fragment.ensemble[slot] for slot in fragment.lost_slots}
        self._throttle = throttle
        self.entries_copied = 0

    async def run(self) -> Versioned[LedgerMetadata]:
        await self.copy()
        return await self.swap_in_metadata()

    async def copy(self) -> None:
        """Every entry the lost slots held, acknowledged by its new bookie.

        The entries of one residue modulo E share a write set, so they are copied as one lane:
        a surviving replica serves them in chunks (ReadEntries with stride E: about a thousand
        entries per call instead of one), the chunk goes to the new bookies, then the next.
        The lanes run side by side; memory is two chunks per lane. An entry no chunk serves (a
        replica without it, a corrupt copy) is read alone from every replica, which either finds
        it or says why it is lost; the first failure cancels every lane and its copies."""
        fragment = self._fragment
        size = len(fragment.ensemble)
        try:
            async with asyncio.TaskGroup() as lanes:  # a lane that fails cancels the others
                for first in range(fragment.first_entry_id, min(fragment.first_entry_id + size,
                                                                fragment.last_entry_id + 1)):
                    slots = [s for s in fragment.lost_slots if self._distribution.has_entry(first, s)]
                    if slots:
                        lanes.create_task(self._copy_lane(first, slots))
        except* BKError as failed:
            cause: BaseException = failed
            while isinstance(cause, BaseExceptionGroup):  # lanes nest their chunks' task groups
                cause = cause.exceptions[0]
            raise LedgerRecoveryError(
                f"ledger {fragment.ledger_id}: cannot re-replicate entries {fragment.first_entry_id}.."
                f"{fragment.last_entry_id}: {cause}"
            ) from cause

    async def _copy_lane(self, first: int, slots: Sequence[int]) -> None:
        fragment = self._fragment
        stride = len(fragment.ensemble)
        write_set = [fragment.ensemble[i] for i in self._distribution.write_set(first)]
        # the lost bookies last: one may only be stopped (a decommission), and then still answers
        sources = sorted(write_set, key=lambda bookie: bookie in self._lost)
        last = fragment.last_entry_id
        chunk = _ChunkSize(self._ctx.config.read_batch_max_entries)
        # the next chunk is read while this one is written: two chunks per lane at most
        reading: asyncio.Future[list[bytes]] | None = asyncio.ensure_future(
            self._read_chunk(first, stride, sources, chunk)
        )
        entry_id = first
        try:
            while reading is not None:
                bodies = await reading
                following = entry_id + len(bodies) * stride
                reading = (asyncio.ensure_future(self._read_chunk(following, stride, sources, chunk))
                           if following <= last else None)
                async with asyncio.TaskGroup() as writes:  # one failing cancels the others
                    for k, body in enumerate(bodies):
                        if self._throttle is not None:  # per entry read, as BookKeeper paces it
                            await self._throttle.acquire(len(body))
                        for slot in slots:
                            target = self._targets[slot]
                            writes.create_task(self._write(target, entry_id + k * stride, body))
                self.entries_copied += len(bodies)
                entry_id = following
        finally:
            if reading is not None:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)

    async def _read_chunk(
        self, entry_id: int, stride: int, sources: Sequence[str], chunk: _ChunkSize
    ) -> list[bytes]:
        """Verified bodies of ``entry_id``, ``entry_id + stride``, ... (at least the first)."""
        config = self._ctx.config
        ledger_id = self._fragment.ledger_id
        remaining = (self._fragment.last_entry_id - entry_id) // stride + 1
        for source in sources:
            count = min(chunk.entries, remaining)
            try:
                bodies = await self._ctx.bookie(source).read_entries(
                    ledger_id, entry_id, count, config.read_batch_max_bytes, stride=stride,
                    timeout=config.read_entry_timeout_s,
                )
            except BKTimeoutError:
                chunk.timed_out(count)
                log.info("ledger %d: %d entries from %s timed out; asking for %d at a time", ledger_id,
                         count, source, chunk.entries)
                continue
            except BKError as exc:
                log.debug("ledger %d: bulk read from %d on %s failed: %s", ledger_id, entry_id, source, exc)
                continue
            verified: list[bytes] = []
            for k, body in enumerate(bodies[:count]):
                try:
                    self._digest.verify_entry(entry_id + k * stride, body)
                except DigestMismatchError as exc:
                    log.warning("bookie %s returned a corrupt copy: %s", source, exc)
                    break
                verified.append(body)
            if verified:
                return verified
        read = await ReadEntryOp(self._ctx, self._digest, ledger_id, entry_id, sources).run()
        return [read.body]

    async def _write(self, bookie_id: str, entry_id: int, body: bytes) -> None:
        try:
            await recovery_add(self._ctx, bookie_id, self._fragment.ledger_id, entry_id,
                               self._digest.master_key, body)
        except TimeoutError:  # the builtin, from wait_for
            raise BKTimeoutError(
                f"bookie {bookie_id}: the copy of entry {entry_id} was not acknowledged in"
                f" {self._ctx.config.add_entry_timeout_s:g} s"
            ) from None

    async def swap_in_metadata(self) -> Versioned[LedgerMetadata]:
        """Name the new bookies in the fragment's segment, by CAS. A slot that no longer holds
        its lost bookie (another tool run replaced it meanwhile) is left as it is."""
        return await MetadataUpdateLoop(
            self._ctx.ledger_manager,
            self._fragment.ledger_id,
            needs_transformation=lambda md: self._swapped(md, warn=False) != md,
            transform=lambda md: self._swapped(md, warn=True),
        ).run()

    def _swapped(self, md: LedgerMetadata, *, warn: bool) -> LedgerMetadata:
        """``md`` with this fragment's lost bookies replaced by their targets where they still
        are; ``warn`` logs the slots left alone."""
        fragment = self._fragment
        segment = next((s for s in md.segments if s.first_entry_id == fragment.first_entry_id), None)
        if segment is None:
            raise LedgerRecoveryError(
                f"ledger {fragment.ledger_id}: the segment at entry {fragment.first_entry_id} is gone"
            )
        updated = md
        for slot, new in self._targets.items():
            old = fragment.ensemble[slot]
            if segment.bookies[slot] == old:
                updated = updated.replace_bookie(fragment.first_entry_id, old, new)
            elif segment.bookies[slot] != new and warn:
                log.warning("ledger %d: slot %d of the segment at entry %d is now %s, not %s; left as is",
                            fragment.ledger_id, slot, fragment.first_entry_id, segment.bookies[slot], old)
        return updated
