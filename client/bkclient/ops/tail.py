"""Pipelined long polls: how a tailing reader keeps up with a busy writer at low latency.

A single long poll answers one question ("has the LAC passed L?") and piggybacks one entry, so a
reader that polls, reads, polls again pays a round trip per step and falls behind a writer that
appends every millisecond. Instead, this keeps ``window`` polls parked at once, one per upcoming
entry: the poll for entry ``e`` asks for "the entry after ``e - 1``" and goes to the last bookie of
``e``'s write set, which also stores ``e + 1`` and so learns first that ``e`` is confirmed (the
choice rotates with ``e``, spreading the load over the ensemble). Each bookie answers
the moment its LAC passes ``e - 1``, with the entry, verified here. One RPC per entry, no fan-out,
no cancellations in the steady state; answers are handed out strictly in entry order.

A bookie only learns a LAC from entries it stores. After a burst of concurrent adds (whose entries
carry an older LAC) and a pause, the head's bookie may not know yet that the head is committed
while another bookie does: if the head is not answered within ``fan_out_delay_s``, the head poll is
also sent to the whole ensemble (ReadLastConfirmedAndEntryOp) and the first answer wins.

The pipeline stops (and the caller falls back to range reads or the quorum-based long poll) when a
poll fails or times out, when the fan-out reports a LAC without the entry, or when ``stop`` is set:
the metadata changed (ledger closed, ensemble changed). Parked polls are bounded by ``window``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncGenerator

from bkclient.digest import DigestManager
from bkclient.entry import LastConfirmedAndEntry, LedgerEntry
from bkclient.ops.read import ReadContext, discard_tasks, write_set_bookies
from bkclient.ops.read_lac import ReadLastConfirmedAndEntryOp, poll_bookie
from bkmeta.model import LedgerMetadata
from bkproto.errors import BKError

log = logging.getLogger(__name__)


class PipelinedPolls:
    """Entries from ``first`` on, each as soon as it is committed, until the pipeline stops.

    After iteration, ``stopped_by_event`` tells whether ``stop`` ended it (look at the metadata
    again) or a poll gave no entry (fall back to the robust path)."""

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
    ) -> None:
        self._ctx = ctx
        self._digest = digest
        self._metadata = metadata
        self._ledger_id = ledger_id
        self._next = first
        self._window = window
        self._timeout_s = timeout_s
        self._stop = stop
        self._fan_out_delay_s = fan_out_delay_s
        self.stopped_by_event = False
        self.last_add_confirmed = first - 1

    def _poll(self, entry_id: int) -> asyncio.Task[LastConfirmedAndEntry]:
        # The last bookie of the write set also stores entry_id + 1 (Qw >= 2), which carries the
        # LAC that confirms entry_id: it is the first to be able to answer.
        bookie_id = write_set_bookies(self._metadata, entry_id)[-1]
        return asyncio.ensure_future(
            poll_bookie(self._ctx, self._digest, self._ledger_id, bookie_id, entry_id - 1, self._timeout_s)
        )

    async def _fan_out(self, entry_id: int) -> LastConfirmedAndEntry:
        op = ReadLastConfirmedAndEntryOp(
            self._ctx, self._ledger_id, self._metadata, self._digest, entry_id - 1, self._timeout_s
        )
        return await op.run()

    async def entries(self) -> AsyncGenerator[LedgerEntry, None]:
        window: deque[asyncio.Task[LastConfirmedAndEntry]] = deque()
        stopped = asyncio.ensure_future(self._stop.wait())
        scheduled = self._next
        try:
            while True:
                while len(window) < self._window:
                    window.append(self._poll(scheduled))
                    scheduled += 1
                head = window[0]
                if not head.done():
                    await asyncio.wait(
                        (head, stopped), timeout=self._fan_out_delay_s, return_when=asyncio.FIRST_COMPLETED
                    )
                if not head.done() and not stopped.done():
                    # Only bookies that stored an entry carrying the new LAC know it. After a burst
                    # and a pause that may not include the head's bookie: ask the whole ensemble.
                    fan_out = asyncio.ensure_future(self._fan_out(self._next))
                    try:
                        await asyncio.wait((head, fan_out, stopped), return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        if not fan_out.done():
                            fan_out.cancel()
                    if not head.done():
                        if stopped.done():
                            self.stopped_by_event = True
                            return
                        answer = fan_out.result() if not fan_out.exception() else None
                        if answer is None or answer.entry is None:
                            if answer is not None:
                                self.last_add_confirmed = max(
                                    self.last_add_confirmed, answer.last_add_confirmed
                                )
                            return  # no progress, or the LAC moved: the caller reads or polls
                        head.cancel()
                        window.popleft()
                        self.last_add_confirmed = max(self.last_add_confirmed, answer.last_add_confirmed)
                        self._next += 1
                        yield answer.entry
                        continue
                if not head.done():
                    self.stopped_by_event = True
                    return
                window.popleft()
                error = head.exception()
                if error is not None:
                    if not isinstance(error, BKError):
                        raise error
                    log.debug("ledger %d: poll for entry %d ended: %s", self._ledger_id, self._next, error)
                    return
                answer = head.result()
                self.last_add_confirmed = max(self.last_add_confirmed, answer.last_add_confirmed)
                if answer.entry is None:
                    return
                self._next += 1
                yield answer.entry
                if self._stop.is_set():
                    self.stopped_by_event = True
                    return
        finally:
            discard_tasks(window)
            stopped.cancel()
