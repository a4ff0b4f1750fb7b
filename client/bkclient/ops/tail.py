"""Stride polls: how a tailing reader keeps up with a busy writer at low latency.

A poll that answers "has the LAC passed L?" with one entry costs a request and an answer per
entry; a reader that fell behind (a disk stall held the writer's acks, then a run of entries was
confirmed at once) would pay that per entry exactly when it is furthest behind. Instead each
bookie of the ensemble gets one parked *stride poll* for the entries whose write set ends with it:
bookie ``(e + Qw - 1) % E`` for entry ``e``, which also stores ``e + 1`` and so learns first that
``e`` is confirmed. The bookie answers as soon as its LAC reaches the first of them, with every
confirmed entry of its stride (``e``, ``e + E``, ``e + 2E``, ...): one message per bookie for a
whole run. The poll *stands* (docs/protocol.md): the bookie answers it again each time its LAC
moves, up to the share of the window it was asked for, so a steady tail sends a request per
window rather than per entry. One pump task per bookie verifies and buffers each answer as it
comes and wakes the pipeline, which hands entries out strictly in entry order; a bookie's next
poll starts after the last entry it returned.

A bookie only learns a LAC from entries it stores. After a burst of concurrent adds (whose entries
carry an older LAC) and a pause, the head's bookie may not know yet that the head is committed
while another bookie does: if the head has not arrived within ``fan_out_delay_s``, it is also
asked of the whole ensemble (ReadLastConfirmedAndEntryOp) and the first answer wins.

The pipeline stops (and the caller falls back to range reads or the quorum-based long poll) when a
poll fails or times out, when a bookie reports a LAC past an entry it does not hold, at the end of
the segment it started in, or when ``stop`` is set: the metadata changed (ledger closed, ensemble
changed). What is polled for stays within ``window`` entries and ``max_bytes_ahead`` bytes of the
head, which bounds the buffer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from bkclient.digest import DigestManager
from bkclient.entry import LastConfirmedAndEntry, LedgerEntry, ledger_entries
from bkclient.ops.read import ReadContext, discard_tasks, segment_end, write_set_bookies
from bkclient.ops.read_lac import ReadLastConfirmedAndEntryOp
from bkclient.transport import StandingStridePoll
from bkmeta.model import LedgerMetadata
from bkproto.entry_format import HEADER
from bkproto.errors import BKError

log = logging.getLogger(__name__)

_POLL_MAX_BYTES = 1024 * 1024  # bodies per stride-poll answer (the first entry always comes)


class _Stopped(Exception):
    """The pipeline cannot go on; the caller takes the robust path from the head."""


class StridePolls:
    """Entries from ``first`` on, each as soon as it is committed, until the pipeline stops.

    After iteration, ``stopped_by_event`` tells whether ``stop`` ended it (look at the metadata
    again) or not (fall back to the robust path); ``last_add_confirmed`` is the highest LAC seen."""

    def __init__(
        self,
        ctx: ReadContext,
        digest: DigestManager,
        metadata: LedgerMetadata,
        ledger_id: int,
        first: int,
        window: int,
        timeout_s: float,
        stop: asyncio.Event,
        fan_out_delay_s: float = 0.01,
        max_bytes_ahead: int = 8 * 1024 * 1024,
    ) -> None:
        self._ctx = ctx
        self._digest = digest
        self._metadata = metadata
        self._ledger_id = ledger_id
        self._head = first
        self._window = window
        self._timeout_ms = max(1, int(timeout_s * 1000))
        self._timeout_s = timeout_s
        self._stop = stop
        self._fan_out_delay_s = fan_out_delay_s
        self._max_bytes_ahead = max_bytes_ahead
        self._stride = len(metadata.ensemble_for(first))
        self._end = segment_end(metadata, first)  # None: the open-ended last segment
        self._cursors: dict[str, int] = {}  # per bookie, the next entry of its stride to poll for
        self._pumps: dict[str, asyncio.Task[None]] = {}  # per bookie, its standing poll's pump
        self._standing: dict[str, StandingStridePoll] = {}  # ... and the poll itself
        self._wake: asyncio.Future[None] | None = None  # set while entries() waits
        self._stopped_why: str | None = None  # a pump's reason to stop the pipeline
        self._buffered: dict[int, LedgerEntry] = {}
        self._buffered_bytes = 0
        self.stopped_by_event = False
        self.last_add_confirmed = first - 1

    async def _pump(self, bookie_id: str, first: int, max_count: int) -> None:
        """One standing stride poll of ``bookie_id`` from ``first`` for ``max_count`` entries:
        each answer's entries are verified and buffered as it comes, the bookie's cursor moved
        and the pipeline woken, until the last answer, or until the buffer holds
        ``max_bytes_ahead`` (the poll is then withdrawn, and polled again once the consumer has
        taken entries). A failure, or an answer without entries (a timeout, or a LAC past an
        entry this bookie does not hold), stops the pipeline."""
        stride = self._stride
        poll: StandingStridePoll | None = None
        try:
            poll = self._ctx.bookie(bookie_id).standing_stride_poll(
                self._ledger_id, first, stride, max_count, _POLL_MAX_BYTES, self._timeout_ms
            )
            self._standing[bookie_id] = poll
            while True:
                result = await poll.next()
                bodies = result.bodies
                payloads, corrupt = self._digest.verify_entries(first, stride, bodies)
                if corrupt is not None:
                    raise _Stopped(f"bookie {bookie_id} answered a body that does not verify: {corrupt}")
                if not bodies:
                    self.last_add_confirmed = max(self.last_add_confirmed, result.max_lac)
                    raise _Stopped(f"stride poll on {bookie_id} from entry {first} brought nothing")
                # each verified body's header carries the LAC its writer had when it sent the entry
                piggybacked = max(HEADER.unpack_from(body)[2] for body in bodies)
                lac = max(result.max_lac, piggybacked, first + (len(bodies) - 1) * stride)
                self.last_add_confirmed = max(self.last_add_confirmed, lac)
                for entry in ledger_entries(self._ledger_id, first, stride, payloads):
                    if entry.entry_id >= self._head and entry.entry_id not in self._buffered:
                        self._buffered[entry.entry_id] = entry
                        self._buffered_bytes += len(entry.data)
                first += len(bodies) * stride
                max_count -= len(bodies)  # past its count, more answers are not ours
                self._cursors[bookie_id] = first
                if not result.more or max_count <= 0 or self._buffered_bytes >= self._max_bytes_ahead:
                    return
                self._wake_up()
        except (BKError, _Stopped) as exc:
            self._stopped_why = self._stopped_why or (
                str(exc) if isinstance(exc, _Stopped) else f"stride poll on {bookie_id} failed: {exc}"
            )
        finally:
            if poll is not None:
                if self._standing.get(bookie_id) is poll:
                    del self._standing[bookie_id]
                poll.cancel()
            self._wake_up()  # whatever ended it, the pipeline looks at once

    def _wake_up(self, _done: object = None) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _first_cursors(self) -> dict[str, int]:
        """Each bookie's first entry to poll for: the entries of the next stride it ends."""
        last = self._head + self._stride - 1
        if self._end is not None:
            last = min(last, self._end)
        return {write_set_bookies(self._metadata, e)[-1]: e for e in range(self._head, last + 1)}

    def _last_wanted(self) -> int:
        last = self._head + self._window - 1
        return last if self._end is None else min(last, self._end)

    def _start_pumps(self) -> None:
        """A standing poll for each bookie without one whose next entry is within the window
        (and the buffer below its byte bound): for the entries of the window it holds."""
        if self._buffered_bytes >= self._max_bytes_ahead:
            return
        last = self._last_wanted()
        for bookie_id, first in self._cursors.items():
            if bookie_id not in self._pumps and first <= last:
                count = (last - first) // self._stride + 1
                pump = asyncio.ensure_future(self._pump(bookie_id, first, count))
                self._pumps[bookie_id] = pump

    def _reap_pumps(self) -> None:
        """Forget the pumps that ended; one that failed otherwise than by a bookie's error is a
        bug, raised here."""
        for bookie_id, pump in list(self._pumps.items()):
            if pump.done():
                del self._pumps[bookie_id]
                error = None if pump.cancelled() else pump.exception()
                if error is not None:
                    raise error

    def _take_fan_out(self, fan_out: asyncio.Task[LastConfirmedAndEntry]) -> None:
        answer = None if fan_out.exception() else fan_out.result()
        if answer is None or answer.entry is None:
            if answer is not None:
                self.last_add_confirmed = max(self.last_add_confirmed, answer.last_add_confirmed)
            raise _Stopped("fan-out for the head brought no entry")  # no progress, or the LAC moved
        self.last_add_confirmed = max(self.last_add_confirmed, answer.last_add_confirmed)
        entry = answer.entry
        if entry.entry_id == self._head and entry.entry_id not in self._buffered:
            self._buffered[entry.entry_id] = entry
            self._buffered_bytes += len(entry.data)

    async def entries(self) -> AsyncGenerator[LedgerEntry, None]:
        loop = asyncio.get_running_loop()
        self._cursors = self._first_cursors()
        stopped = asyncio.ensure_future(self._stop.wait())
        stopped.add_done_callback(self._wake_up)
        fan_out: asyncio.Task[LastConfirmedAndEntry] | None = None
        head_since = loop.time()
        try:
            while True:
                if self._end is not None and self._head > self._end:
                    return  # the segment is done; the caller looks at the next one
                entry = self._buffered.pop(self._head, None)
                if entry is not None:
                    self._buffered_bytes -= len(entry.data)
                    self._head += 1
                    head_since = loop.time()
                    if fan_out is not None:
                        discard_tasks((fan_out,))
                        fan_out = None
                    yield entry
                    if self._stop.is_set():
                        self.stopped_by_event = True
                        return
                    continue
                if fan_out is not None and fan_out.done():
                    self._take_fan_out(fan_out)
                    fan_out = None
                    continue
                self._reap_pumps()
                if self._stopped_why is not None:
                    raise _Stopped(self._stopped_why)
                fan_out_at = head_since + self._fan_out_delay_s
                if fan_out is None and loop.time() >= fan_out_at:
                    # Only bookies that stored an entry carrying the new LAC know it. After a burst
                    # and a pause that may not include the head's bookie: ask the whole ensemble.
                    fan_out = asyncio.ensure_future(self._fan_out(self._head))
                    fan_out.add_done_callback(self._wake_up)
                self._start_pumps()
                # Until a pump buffers entries or fails, the fan-out answers, the fan-out is due or
                # the metadata changes.
                self._wake = loop.create_future()
                timer = loop.call_at(fan_out_at, self._wake_up) if fan_out is None else None
                try:
                    await self._wake
                finally:
                    self._wake = None
                    if timer is not None:
                        timer.cancel()
                if stopped.done():
                    self.stopped_by_event = True
                    return
        except _Stopped as why:
            log.debug("ledger %d: tail pipeline stops at entry %d: %s", self._ledger_id, self._head, why)
        finally:
            discard_tasks([*self._pumps.values(), *([fan_out] if fan_out is not None else []), stopped])
            self._pumps.clear()
            for poll in list(self._standing.values()):
                poll.cancel()
            self._standing.clear()

    async def _fan_out(self, entry_id: int) -> LastConfirmedAndEntry:
        op = ReadLastConfirmedAndEntryOp(
            self._ctx, self._ledger_id, self._metadata, self._digest, entry_id - 1, self._timeout_s
        )
        return await op.run()
