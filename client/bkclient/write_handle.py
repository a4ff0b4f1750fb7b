"""Writing a ledger: ordered quorum appends, ensemble changes, explicit LAC, force and close.

Rules (BookKeeper's ``LedgerHandle`` / ``PendingAddOp``, reference §1.4):

* Entry ``e`` goes to its write set ``(e + i) % E`` of the current (last) ensemble, its body carrying
  the handle's LAC at send time (the LAC piggyback). It completes at Qa acks; the application hears
  about completions strictly in entry-id order, and the LAC advances with them.
* A bookie that fails an add (or does not answer within ``add_entry_timeout_s``) is replaced: the
  metadata gets a new segment starting at LAC+1 by compare-and-set, and every pending add re-sends
  its copy to the new bookie. While that runs, no completion is released: otherwise an entry could
  be acknowledged as stored on the old ensemble while metadata says the new one holds it.
* Fencing (LedgerFencedError), a wrong password (UnauthorizedAccessError), metadata saying the
  ledger is in recovery or closed, or an impossible ensemble change fail every pending add and
  every later call with that error.
* Adds appended while others are outstanding leave together at the end of the loop turn (one
  encode pass, one queueing call per bookie); a lone add leaves at once. An add is encoded, and
  its bookies read from the ensemble, only when it leaves. ``append_batch_async`` appends a list
  of payloads with one future.
* Backpressure: at most ``max_outstanding_adds`` adds / ``max_outstanding_bytes`` payload bytes are
  sent and not yet completed; further adds wait unsent (``append`` awaits room first, and at most
  ``max_waiting_adds`` may wait behind ``append_async``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine, Sequence
from itertools import accumulate, count
from types import TracebackType
from typing import Any

from bkmeta.model import LedgerMetadata, Versioned
from bkproto.entry_format import HEADER_SIZE
from bkproto.errors import (
    BadRequestError,
    BKError,
    ClientClosedError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    UnauthorizedAccessError,
    WriteError,
)
from bkproto.errors import TimeoutError as BKTimeoutError

from .add_stream import LedgerAddRequestEncoder
from .config import ClientConfig
from .context import ClientContext
from .digest import DigestManager
from .distribution import RoundRobinDistribution
from .ops.add import (
    AddCompletion,
    EnsembleSlotListener,
    PendingAddOp,
    adds_that_would_wait,
    checked_payloads,
    send_adds,
)
from .ops.write_lac import write_lac_to_ensemble
from .ops.write_metadata import close_at, replace_failed_bookies
from .read_handle import ReadHandle
from .transport import BookieConnection

log = logging.getLogger(__name__)

# How long a bookie that failed an add is avoided as a replacement (while others are available).
_QUARANTINE_S = 60.0

# Errors after which the handle can never write again (BookKeeper's handleUnrecoverableErrorDuringAdd).
# A bad request (say, an entry over a bookie's nettyMaxFrameSizeBytes) would be refused by any
# replacement bookie too: changing the ensemble for it would only loop.
_FATAL_ADD_ERRORS = (LedgerFencedError, UnauthorizedAccessError, BadRequestError)


class WriteHandle(ReadHandle):
    """A ledger opened for writing by its creator. Create with ``BookKeeper.create_ledger``."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: Versioned[LedgerMetadata],
        digest: DigestManager,
    ) -> None:
        super().__init__(ctx, ledger_id, metadata, digest)
        md = metadata.value
        self._client_ctx = ctx  # the full context (ReadHandle keeps the read-side view)
        self._config = ctx.config
        self.master_key = digest.master_key
        self._encoder = LedgerAddRequestEncoder(ledger_id, digest)
        self._max_payload = self._config.max_entry_size_bytes - HEADER_SIZE - digest.digest_size
        self.distribution = RoundRobinDistribution(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
        self.ensemble: list[str] = list(md.last_ensemble)
        self._clients: list[BookieConnection] = [ctx.bookie(b) for b in self.ensemble]
        # The listener each slot's adds are queued with: answers arrive per slot and message.
        self._slot_listeners = [EnsembleSlotListener(self, i) for i in range(md.ensemble_size)]
        self.last_add_pushed = md.last_entry_id if md.is_closed else -1
        self._pushed_length = self.length
        self._pending: dict[int, PendingAddOp] = {}
        self._waiting: deque[PendingAddOp] = deque()
        self._unsent: list[PendingAddOp] = []  # sent in this loop turn, flushed at its end
        self._outstanding_adds = 0
        self._outstanding_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._append_lock = asyncio.Lock()
        self._progress = asyncio.Event()  # set when an add completes or the handle fails
        self._coarse_now = ctx.clock.monotonic()  # send timestamps; advanced by the timeout monitor
        self._failed_bookies: dict[int, str] = {}  # index -> bookie id, awaiting replacement
        self._recently_failed: dict[str, float] = {}  # bookie id -> clock time of its last failure
        self._changing_ensemble = False
        self.ensemble_changes = 0
        self._error: BKError | None = None
        self._closing = False
        self._write_closed = False
        self._piggybacked_lac = -1  # the LAC carried by the last entry sent
        self._explicit_lac = -1
        self._tasks: set[asyncio.Task[None]] = set()
        self._spawn(self._monitor_add_timeouts(), "add-timeouts")
        if self._config.explicit_lac_interval_s > 0:
            self._spawn(self._flush_explicit_lac(), "explicit-lac")

    @property
    def config(self) -> ClientConfig:
        return self._config

    # -- appending -----------------------------------------------------------------------------

    async def append(self, data: bytes) -> int:
        """Append ``data``; returns its entry id once Qa bookies stored it. Waits for room
        under the outstanding-adds limits first (backpressure)."""
        async with self._append_lock:  # FIFO: appends keep the order in which they were called
            await self.wait_writable()
            future = self.append_async(data)
        return await future

    def append_async(self, data: bytes) -> asyncio.Future[int]:
        """Append without waiting; the future resolves to the entry id, in entry-id order."""
        self._check_writable()
        future: asyncio.Future[int] = self._client_ctx.loop.create_future()
        self._add(self.last_add_pushed + 1, data, future, None)
        return future

    def append_with_callback(self, data: bytes, callback: AddCompletion) -> int:
        """Append without waiting and without a future (BookKeeper's ``asyncAddEntry``): returns
        the entry id at once; ``callback(entry_id, None)`` runs when the add completes (in
        entry-id order), ``callback(entry_id, error)`` if it fails. Cheapest way to pipeline."""
        self._check_writable()
        entry_id = self.last_add_pushed + 1
        self._add(entry_id, data, None, callback)
        return entry_id

    def append_batch_async(self, payloads: Sequence[bytes]) -> asyncio.Future[int]:
        """Append ``payloads`` as consecutive entries without waiting; the future resolves to the
        last entry id once all completed (in order), or fails with the handle's error (then
        ``last_add_confirmed`` says which completed). Checked whole first: not a list or tuple of
        bytes-like payloads, empty, a payload too large, or more than ``max_waiting_adds`` left
        waiting raise and append nothing. One future and one check per batch."""
        self._check_writable()
        batch, sizes, waits = self._checked_batch(payloads)
        future: asyncio.Future[int] = self._client_ctx.loop.create_future()
        first = self.last_add_pushed + 1
        write_set = self.distribution.write_set
        lengths = accumulate(sizes, initial=self._pushed_length)
        next(lengths)
        ops = [
            PendingAddOp(entry_id, payload, length, write_set(entry_id), None, None)
            for entry_id, payload, length in zip(count(first), batch, lengths)
        ]
        ops[-1].future = future
        self._pending.update(zip(count(first), ops))
        self.last_add_pushed = ops[-1].entry_id
        self._pushed_length = ops[-1].length
        if waits:
            self._waiting.extend(ops[len(ops) - waits :])
            self._room.clear()
            del ops[len(ops) - waits :]
        if len(ops) == 1:
            self._send(ops[0])  # a lone add leaves at once
        elif ops:
            self._send_batch(ops, sum(op.size for op in ops))
        return future

    async def append_batch(self, payloads: Sequence[bytes]) -> int:
        """:meth:`append_batch_async` once there is room for an add (backpressure, as
        :meth:`append`), then wait for the whole batch; returns its last entry id."""
        async with self._append_lock:
            await self.wait_writable()
            future = self.append_batch_async(payloads)
        return await future

    def _checked_batch(self, payloads: Sequence[bytes]) -> tuple[list[bytes], list[int], int]:
        """``payloads`` as bytes, their sizes, and how many of them will wait for room, after
        :meth:`append_batch_async`'s checks."""
        batch, sizes = checked_payloads(self.ledger_id, payloads, self._max_payload)
        config = self._config
        waits = len(sizes) if self._waiting else adds_that_would_wait(
            sizes, self._outstanding_adds, self._outstanding_bytes, config.max_outstanding_adds,
            config.max_outstanding_bytes,
        )
        if waits > config.max_waiting_adds - len(self._waiting):
            raise TooManyRequestsError(
                f"ledger {self.ledger_id}: a batch of {len(batch)} adds would leave more than"
                f" max_waiting_adds={config.max_waiting_adds} waiting for room; send smaller batches"
                " or await append_batch() or wait_writable() to pace the writer"
            )
        return batch, sizes, waits

    async def wait_writable(self) -> None:
        """Return once an add would be sent at once (outstanding limits not reached)."""
        while not self._room.is_set():
            self._check_writable()
            await self._room.wait()
        self._check_writable()

    def _check_writable(self) -> None:
        if self._error is not None:
            raise type(self._error)(self._error.message)
        if self._closing or self._write_closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed for writing")

    def _add(
        self,
        entry_id: int,
        data: bytes,
        future: asyncio.Future[int] | None,
        callback: AddCompletion | None,
    ) -> None:
        if len(self._waiting) >= self._config.max_waiting_adds:
            raise TooManyRequestsError(
                f"ledger {self.ledger_id}: {len(self._waiting)} adds already wait for room; "
                "await append() or wait_writable() to pace the writer"
            )
        payload = data if type(data) is bytes else bytes(data)  # bytes(bytes) is a call for nothing
        if len(payload) > self._max_payload:
            limit = self._config.max_entry_size_bytes
            raise IncorrectParameterError(
                f"ledger {self.ledger_id}: an entry of {len(payload)} bytes is over the"
                f" {self._max_payload}-byte limit (ClientConfig.max_entry_size_bytes={limit}, the"
                f" bookies' nettyMaxFrameSizeBytes, less {limit - self._max_payload} bytes of header"
                " and digest)"
            )
        self.last_add_pushed = max(self.last_add_pushed, entry_id)
        self._pushed_length += len(payload)
        op = PendingAddOp(
            entry_id, payload, self._pushed_length, self.distribution.write_set(entry_id), future, callback
        )
        self._pending[entry_id] = op
        # _has_room, inlined: this runs once per entry.
        outstanding = self._outstanding_adds
        if not self._waiting and (
            outstanding == 0
            or (
                outstanding < self._config.max_outstanding_adds
                and self._outstanding_bytes + op.size <= self._config.max_outstanding_bytes
            )
        ):
            self._send(op)
        else:
            self._waiting.append(op)
            self._room.clear()

    def _has_room(self, size: int) -> bool:
        if self._outstanding_adds == 0:
            return True  # one add always goes, however large
        return (
            self._outstanding_adds < self._config.max_outstanding_adds
            and self._outstanding_bytes + size <= self._config.max_outstanding_bytes
        )

    def _send(self, op: PendingAddOp) -> None:
        """Count ``op`` as outstanding and send it: at once if it is the only add outstanding,
        else with the loop turn's other adds in one :meth:`_flush_unsent` at the turn's end
        (encoded in one pass, queued per bookie in one call, not per entry and per bookie)."""
        self._outstanding_adds += 1
        self._outstanding_bytes += op.size
        unsent = self._unsent
        if unsent:
            unsent.append(op)
        elif self._outstanding_adds == 1:
            self._send_now((op,))
        else:
            unsent.append(op)
            self._client_ctx.loop.call_soon(self._flush_unsent)

    def _send_batch(self, ops: list[PendingAddOp], size: int) -> None:
        """:meth:`_send` of each of ``ops`` (``size``: their payload bytes), as one step."""
        self._outstanding_adds += len(ops)
        self._outstanding_bytes += size
        unsent = self._unsent
        if not unsent:
            self._client_ctx.loop.call_soon(self._flush_unsent)
        unsent += ops

    def _flush_unsent(self) -> None:
        """Send the adds :meth:`_send` held in this loop turn. The ensemble is read now: an
        ensemble change adopted since their append re-sent nothing of theirs (they were not
        encoded yet, ``PendingAddOp.resend``), so they go to the bookies that hold the slots now."""
        ops = self._unsent
        if not ops:
            return
        self._unsent = []
        if self._error is None:  # else _fail failed them already
            self._send_now(ops)

    def _send_now(self, ops: Sequence[PendingAddOp]) -> None:
        """Encode ``ops`` with the LAC of now and queue them to the bookies of the current ensemble."""
        lac = self.last_add_confirmed
        self._piggybacked_lac = lac
        send_adds(
            ops, self._encoder, lac, self._coarse_now, self.distribution, self._clients, self._slot_listeners
        )

    def _release_room(self) -> None:
        waiting = self._waiting
        while waiting and self._has_room(waiting[0].size):
            op = waiting.popleft()
            if not op.done:
                self._send(op)
        if not waiting and self._has_room(0):
            self._room.set()

    # -- completions (called by the slot listeners) --------------------------------------------

    def adds_acked(self, index: int, bookie_id: str, entry_ids: Sequence[int]) -> None:
        """``ensemble[index]`` (``bookie_id``) acknowledged ``entry_ids`` (one answer message's
        worth): count each ack, then release what completed in entry-id order, in one pass."""
        if self.ensemble[index] != bookie_id:
            return  # a replaced bookie answering late: its copies no longer count
        pending = self._pending
        bit = 1 << index
        quorum = self.distribution.ack_quorum
        completed = False
        for op in map(pending.get, entry_ids):
            if op is None or op.done:  # failed with the handle, or answered twice after a re-send
                continue
            acked = op.acked | bit
            op.acked = acked
            if not op.completed and acked.bit_count() >= quorum:
                op.completed = True
                completed = True
        if completed:
            self._progress.set()
            self._release_completed()

    def add_refused(self, index: int, bookie_id: str, entry_id: int, error: BKError) -> None:
        """``ensemble[index]`` (``bookie_id``) failed the add of ``entry_id``."""
        op = self._pending.get(entry_id)
        if op is None or op.done or self.ensemble[index] != bookie_id:
            return
        self.bookie_failed(index, bookie_id, error)

    def _release_completed(self) -> None:
        """Pop completed adds in entry-id order, advancing the LAC (never during an ensemble change)."""
        if self._changing_ensemble or self._error is not None:
            return
        pending = self._pending
        next_id = self.last_add_confirmed + 1
        op = pending.get(next_id)
        released = False
        while op is not None and op.completed:
            del pending[next_id]
            self.last_add_confirmed = next_id
            self.length += op.size  # not op.length: a ledger-adv writer may send ids out of order
            self._outstanding_adds -= 1
            self._outstanding_bytes -= op.size
            # PendingAddOp.succeed, inlined: this runs once per entry.
            op.done = True
            future = op.future
            if future is not None and not future.done():  # the caller may have cancelled it
                future.set_result(next_id)
            callback = op.callback
            if callback is not None:
                try:
                    callback(next_id, None)
                except Exception:  # the writer's bookkeeping must survive a broken application callback
                    log.exception("add completion callback for entry %d failed", next_id)
            released = True
            next_id += 1
            op = pending.get(next_id)
        if released:
            self._release_room()

    def bookie_failed(self, index: int, bookie_id: str, error: BKError) -> None:
        """An add to ``ensemble[index]`` failed (or timed out)."""
        if self._error is not None or self.ensemble[index] != bookie_id:
            return
        if isinstance(error, _FATAL_ADD_ERRORS):
            self._fail(error)
            return
        if index in self._failed_bookies:
            return
        log.info("ledger %d: bookie %s failed an add (%s), replacing it", self.ledger_id, bookie_id, error)
        self._failed_bookies[index] = bookie_id
        self._recently_failed[bookie_id] = self._client_ctx.clock.monotonic()
        if not self._changing_ensemble:
            self._changing_ensemble = True
            self._spawn(self._ensemble_change_loop(), "ensemble-change")

    def _fail(self, error: BKError) -> None:
        """Unrecoverable: every pending and waiting add fails with ``error``, and so will later calls."""
        if self._error is not None:
            return
        pending = list(self._pending.values())
        if pending or self._waiting:  # a handle left open but idle at client close loses nothing
            log.warning("ledger %d: writes failed: %s", self.ledger_id, error)
        else:
            log.debug("ledger %d: no more writes: %s", self.ledger_id, error)
        self._error = error
        self._pending.clear()
        for op in pending:
            if not op.done:
                op.fail(error)
        self._waiting.clear()
        self._outstanding_adds = self._outstanding_bytes = 0
        self._room.set()  # wake writers so they see the error
        self._progress.set()

    # -- ensemble change -----------------------------------------------------------------------

    async def _ensemble_change_loop(self) -> None:
        try:
            while self._failed_bookies and self._error is None:
                failed = dict(self._failed_bookies)
                if self.ensemble_changes >= self._config.max_ensemble_changes:
                    raise WriteError(f"ledger {self.ledger_id}: too many ensemble changes")
                versioned = await replace_failed_bookies(
                    self._client_ctx.ledger_manager, self.ledger_id, self.versioned_metadata, failed,
                    self.last_add_confirmed + 1, self._pick_replacement,
                )
                if self._error is not None:
                    return
                self._adopt_ensemble(versioned, failed)
        except BKError as exc:
            self._fail(exc)
        finally:
            self._changing_ensemble = False
        self._release_completed()
        self._progress.set()  # close() and force() wait for the change to end

    def _pick_replacement(self, ensemble: list[str], index: int, write_quorum: int) -> str:
        """A new bookie for slot ``index``. Bookies that failed this handle recently are avoided
        while others exist: a crashed bookie stays registered until its ZooKeeper session expires
        (BookKeeper's bookie quarantine, simplified)."""
        placement = self._client_ctx.placement
        racks = self._client_ctx.writable_bookie_racks()
        now = self._client_ctx.clock.monotonic()
        recent = {b for b, at in self._recently_failed.items() if now - at < _QUARANTINE_S}
        try:
            return placement.replace_bookie(ensemble, index, write_quorum, racks, recent)
        except NotEnoughBookiesError:
            failing_now = set(self._failed_bookies.values())
            return placement.replace_bookie(ensemble, index, write_quorum, racks, failing_now)

    def _adopt_ensemble(self, versioned: Versioned[LedgerMetadata], failed: dict[int, str]) -> None:
        self.update_metadata(versioned)
        self.ensemble = list(versioned.value.last_ensemble)
        self._clients = [self._client_ctx.bookie(b) for b in self.ensemble]
        self.ensemble_changes += 1
        for index, bookie_id in failed.items():
            if self._failed_bookies.get(index) == bookie_id:
                del self._failed_bookies[index]
        log.info("ledger %d: new ensemble %s from entry %d", self.ledger_id, self.ensemble,
                 self.last_add_confirmed + 1)
        now = self._client_ctx.clock.monotonic()
        quorum = self.distribution.ack_quorum
        encoder = self._encoder
        for op in list(self._pending.values()):
            for index in failed:
                op.resend(index, self._clients[index], self._slot_listeners[index], encoder, quorum, now)

    # -- timers --------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = self._client_ctx.loop.create_task(coro, name=f"ledger-{self.ledger_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _monitor_add_timeouts(self) -> None:
        """A bookie that leaves an add unanswered past the timeout counts as failed.

        Sends are stamped with a coarse clock this task advances every ``period`` (reading the
        loop clock per add was a measurable share of the client's CPU), so the deadline allows
        one extra period: an add times out between ``timeout`` and ``timeout + period``."""
        timeout = self._config.add_entry_timeout_s
        period = min(1.0, timeout / 2)
        clock = self._client_ctx.clock
        while True:
            await asyncio.sleep(period)
            self._coarse_now = clock.monotonic()
            if self._error is not None:
                return
            deadline = self._coarse_now - timeout - period
            for op in list(self._pending.values()):
                if op.body is None or op.sent_at > deadline or op.done:
                    continue
                for index in op.unacked_indices():
                    self.bookie_failed(
                        index, self.ensemble[index], BKTimeoutError(f"add of entry {op.entry_id} timed out")
                    )

    async def _flush_explicit_lac(self) -> None:
        """Send the LAC explicitly when no later entry carried it (writer idle): tailing readers
        would otherwise not learn about the last entries until the next append."""
        interval = self._config.explicit_lac_interval_s
        while True:
            await asyncio.sleep(interval)
            if self._error is not None or self._write_closed:
                return
            lac = self.last_add_confirmed
            if lac > self._explicit_lac and lac > self._piggybacked_lac:
                await self.write_explicit_lac(lac)

    async def write_explicit_lac(self, lac: int | None = None) -> None:
        """WriteLac to every bookie of the current ensemble (failures are only logged)."""
        lac = self.last_add_confirmed if lac is None else lac
        body = self.digest.encode_lac(lac)
        if await write_lac_to_ensemble(
            self.ledger_id, self.ensemble, self._clients, self.master_key, lac, body
        ):
            self._explicit_lac = max(self._explicit_lac, lac)

    # -- force and close -----------------------------------------------------------------------

    async def force(self) -> int:
        """Wait for every add appended so far, then make the bookies of the current ensemble
        sync this ledger. Returns the LAC covered: the one when the syncs were sent (entries up
        to it are on those bookies even if one is replaced meanwhile: a new segment starts after
        it), not one that adds completing during the syncs moved on."""
        await self._wait_pending()
        self._check_writable()
        lac = self.last_add_confirmed
        await asyncio.gather(*(c.force_ledger(self.ledger_id) for c in self._clients))
        return lac

    async def _wait_pending(self) -> None:
        """Until every add appended so far reached its ack quorum and no ensemble change is
        running (adds that reached it during a change are released only once the change is in
        the metadata), or the handle failed."""
        while self._error is None and (
            self._changing_ensemble or any(not op.completed for op in self._pending.values())
        ):
            self._progress.clear()
            await self._progress.wait()

    async def close(self) -> None:
        """Wait for pending adds, then CAS the metadata OPEN → CLOSED at the LAC.

        BookKeeper's rules: already CLOSED at the same last entry and length is success; closed at
        another point raises MetadataVersionError; IN_RECOVERY raises LedgerFencedError."""
        if self._write_closed:
            return
        self._closing = True
        try:
            await self._wait_pending()
            self._abandon_unreachable()
            closed = await close_at(
                self._client_ctx.ledger_manager, self.ledger_id, self.versioned_metadata,
                self.last_add_confirmed, self.length,
            )
            self.update_metadata(closed)
        finally:
            await self._stop_timers()

    async def abort(self) -> None:
        """Stop writing without touching metadata (the client is closing): pending adds fail with
        ClientClosedError and the handle's timers stop."""
        if not self._write_closed:
            self._fail(ClientClosedError(f"ledger {self.ledger_id}: the BookKeeper client was closed"))
        await self._stop_timers()

    async def _stop_timers(self) -> None:
        self._write_closed = True
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _abandon_unreachable(self) -> None:
        """Adds that cannot complete (a gap before them, ledger-adv only) fail at close."""
        pending = list(self._pending.values())
        self._pending.clear()
        for op in pending:
            if not op.done:
                op.fail(LedgerClosedError(f"ledger {self.ledger_id} closed before entry {op.entry_id}"))

    async def __aenter__(self) -> WriteHandle:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
