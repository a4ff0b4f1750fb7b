"""Learning the last add confirmed (LAC) from the bookies.

* :class:`ReadLastConfirmedOp` reads entry -1 (each bookie's last entry) from every bookie of the
  last ensemble and completes once the answers cover every write quorum (``coverage.py``), with the
  highest LAC seen. With ``fence=True`` the reads carry the master key and fence the ledger: the
  first step of recovery.
* :class:`TryReadLastConfirmedOp` does not wait for coverage: the first answer that moves the LAC
  forward completes it.
* :class:`ReadLastConfirmedAndEntryOp` is the long poll: each bookie parks the request until its
  LAC passes ``previous_lac`` (or the timeout ends) and then answers with the entry after
  ``previous_lac`` piggybacked, when it holds it.

A bookie's answer carries two LAC hints: the LAC the writer piggybacked in the header of the
bookie's last entry, and ``max_lac``, the bookie's own known LAC (piggybacked or explicit). Both
only ever name entries the writer saw acknowledged, so the maximum is safe to use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from bkclient.coverage import QuorumCoverageSet
from bkclient.digest import DigestManager
from bkclient.entry import LastConfirmedAndEntry, LedgerEntry
from bkclient.ops.read import ReadContext, discard_tasks, is_absent
from bkclient.transport import ReadResult
from bkmeta.model import LedgerMetadata
from bkproto.entry_format import LAST_ADD_CONFIRMED, NO_ENTRY
from bkproto.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    UnauthorizedAccessError,
)

log = logging.getLogger(__name__)


def lac_of(digest: DigestManager, result: ReadResult) -> int:
    """The LAC an answer to a read of entry -1 proves; DigestMismatchError if the body is bad."""
    lac = result.max_lac
    if result.body:
        lac = max(lac, digest.verify_header(result.body).last_add_confirmed)
    return max(lac, NO_ENTRY)


class _FanOut:
    """Sends one read of entry -1 to every bookie of an ensemble and hands out the answers as
    they arrive, as (bookie index, result or error)."""

    def __init__(
        self, ctx: ReadContext, ledger_id: int, ensemble: Sequence[str], fence_key: bytes | None
    ) -> None:
        timeout = ctx.config.read_entry_timeout_s
        self.tasks: dict[asyncio.Task[ReadResult], int] = {}
        for index, bookie_id in enumerate(ensemble):
            call = ctx.bookie(bookie_id).read_entry(
                ledger_id, LAST_ADD_CONFIRMED, fence_master_key=fence_key, timeout=timeout
            )
            self.tasks[asyncio.ensure_future(call)] = index

    async def answers(self) -> list[tuple[int, ReadResult | BKError]]:
        """The next batch of answers; empty when every bookie answered."""
        pending = [t for t in self.tasks if not t.done()]
        if not pending:
            return []
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        out: list[tuple[int, ReadResult | BKError]] = []
        for task in done:
            index = self.tasks[task]
            error = task.exception()
            if error is None:
                out.append((index, task.result()))
            elif isinstance(error, BKError):
                out.append((index, error))
            else:
                raise error
        return out

    def stop(self) -> None:
        discard_tasks(self.tasks)

    def detach(self) -> None:
        """Let the remaining reads finish on their own (fence reads must still reach every bookie
        they can), without reporting their outcome."""
        for task in self.tasks:
            task.add_done_callback(_consume)


def _consume(task: asyncio.Task[ReadResult]) -> None:
    if not task.cancelled():
        task.exception()


class ReadLastConfirmedOp:
    """The LAC once the answers of the last ensemble cover every write quorum."""

    def __init__(
        self,
        ctx: ReadContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        digest: DigestManager,
        *,
        fence: bool = False,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digest = digest
        self._fence = fence

    async def run(self) -> int:
        md = self._metadata
        ensemble = md.last_ensemble
        coverage = QuorumCoverageSet(len(ensemble), md.write_quorum_size, md.ack_quorum_size)
        fan_out = _FanOut(
            self._ctx, self._ledger_id, ensemble, self._digest.master_key if self._fence else None
        )
        best = NO_ENTRY
        errors: list[BKError] = []
        covered = False
        try:
            while not covered and (answers := await fan_out.answers()):
                for index, answer in answers:
                    if isinstance(answer, ReadResult):
                        try:
                            best = max(best, lac_of(self._digest, answer))
                        except DigestMismatchError as exc:
                            # The bookie answered (so a fence reached it) but its LAC hint is
                            # unusable; the LAC is only where recovery starts scanning, so a lower
                            # one from the other bookies is still safe (BookKeeper does the same).
                            log.warning("bookie %s: corrupt last entry: %s", ensemble[index], exc)
                        coverage.add_known(index)
                    elif is_absent(answer):
                        coverage.add_known(index)
                    elif isinstance(answer, UnauthorizedAccessError):
                        raise answer
                    else:
                        errors.append(answer)
                covered = coverage.is_covered()
        finally:
            if self._fence and covered:
                fan_out.detach()
            else:
                fan_out.stop()
        if not covered:
            detail = "; ".join(str(e) for e in errors)
            first = errors[0] if errors else BookieUnavailableError()
            raise type(first)(
                f"ledger {self._ledger_id}: LAC answers do not cover every write quorum: {detail}"
            )
        return best


class TryReadLastConfirmedOp:
    """The first answer showing a LAC above ``known_lac`` completes; otherwise the highest LAC
    once every bookie answered. Fails only if no bookie gave a usable answer."""

    def __init__(
        self,
        ctx: ReadContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        digest: DigestManager,
        known_lac: int,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digest = digest
        self._known_lac = known_lac

    async def run(self) -> int:
        ensemble = self._metadata.last_ensemble
        fan_out = _FanOut(self._ctx, self._ledger_id, ensemble, None)
        best = self._known_lac
        heard = False
        errors: list[BKError] = []
        try:
            while answers := await fan_out.answers():
                for _, answer in answers:
                    if isinstance(answer, ReadResult):
                        try:
                            lac = lac_of(self._digest, answer)
                        except DigestMismatchError as exc:
                            errors.append(exc)
                            continue
                        heard = True
                        if lac > best:
                            return lac
                    elif is_absent(answer):
                        heard = True
                    else:
                        errors.append(answer)
        finally:
            fan_out.stop()
        if not heard:
            first = errors[0] if errors else BookieUnavailableError()
            raise type(first)(f"ledger {self._ledger_id}: no bookie answered a LAC read: {first}")
        return best


async def poll_bookie(
    ctx: ReadContext,
    digest: DigestManager,
    ledger_id: int,
    bookie_id: str,
    previous_lac: int,
    timeout_s: float,
) -> LastConfirmedAndEntry:
    """One bookie's long poll: parks until the bookie's LAC passes ``previous_lac``, then answers
    with its LAC and the entry ``previous_lac + 1`` (ENTRY_PIGGYBACK). NoSuchEntryError when the
    poll timed out or the bookie does not hold that entry."""
    wanted = previous_lac + 1
    result = await ctx.bookie(bookie_id).read_entry(
        ledger_id,
        LAST_ADD_CONFIRMED,  # with ENTRY_PIGGYBACK: "the entry after previous_lac"
        previous_lac=previous_lac,
        long_poll_timeout_ms=max(1, int(timeout_s * 1000)),
        piggyback=True,
    )
    lac = max(result.max_lac, previous_lac)
    if not result.body:
        return LastConfirmedAndEntry(lac, None)
    verified = digest.verify_header(result.body)
    lac = max(lac, verified.last_add_confirmed)
    if verified.entry_id != wanted or lac < wanted:
        return LastConfirmedAndEntry(lac, None)
    return LastConfirmedAndEntry(lac, LedgerEntry(ledger_id, wanted, verified.payload))


class ReadLastConfirmedAndEntryOp:
    """Long poll: park on every bookie of the ensemble that will hold ``previous_lac + 1`` until
    one reports a LAC above ``previous_lac``. Returns the new LAC with the entry
    ``previous_lac + 1`` when the answering bookie piggybacked it, or ``previous_lac`` and no
    entry if the poll timed out everywhere."""

    def __init__(
        self,
        ctx: ReadContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        digest: DigestManager,
        previous_lac: int,
        timeout_s: float,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digest = digest
        self._previous_lac = previous_lac
        self._timeout_s = timeout_s

    async def _poll(self, bookie_id: str) -> LastConfirmedAndEntry:
        return await poll_bookie(
            self._ctx, self._digest, self._ledger_id, bookie_id, self._previous_lac, self._timeout_s
        )

    async def run(self) -> LastConfirmedAndEntry:
        ensemble = self._metadata.ensemble_for(self._previous_lac + 1)
        tasks = {asyncio.ensure_future(self._poll(b)): b for b in ensemble}
        errors: list[BKError] = []
        heard = False
        best = LastConfirmedAndEntry(self._previous_lac, None)
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    error = task.exception()
                    if error is not None:
                        if not isinstance(error, BKError):
                            raise error
                        if not is_absent(error):
                            log.debug("long poll on bookie %s failed: %s", tasks[task], error)
                        errors.append(error)
                        continue
                    heard = True
                    answer = task.result()
                    if answer.entry is not None:
                        return answer
                    if answer.last_add_confirmed > best.last_add_confirmed:
                        best = answer
                if best.last_add_confirmed > self._previous_lac:
                    # The LAC moved; the entry itself is one ordinary read away.
                    return best
        finally:
            discard_tasks(tasks)
        if not heard and errors and not all(is_absent(e) for e in errors):
            first = next(e for e in errors if not is_absent(e))
            raise type(first)(f"ledger {self._ledger_id}: long poll failed on every bookie: {first}")
        return best
