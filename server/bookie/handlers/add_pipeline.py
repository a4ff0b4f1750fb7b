"""One add stream's batches without a task, a queue or an async generator of its own: the add
port's side of :class:`~bookie.handlers.add_entries.AddEntriesHandler`.

The carrier (an add-port connection, ``bookie.add_port_connection``) hands each decoded message
to :meth:`AddPipeline.offer` in the step that received its last byte. The message is started at
once when the stream has fewer than ``add_stream_window`` batches unanswered and its bytes fit in
both byte budgets (in progress, unanswered; per peer and in total); else ``offer`` says no and the
carrier stops reading until :meth:`AddStreamCarrier.room` tells it to offer again. Each batch runs
the shared :meth:`AddBatchProcessor.process` and, in the step that finishes it, hands over every
finished answer at the head of the stream, in request order, for as long as the carrier takes
them (a carrier whose peer does not read its answers stops taking them; the answers wait, holding
their bytes in the unanswered budget, until :meth:`AddPipeline.flush`).

On the way from a frame to its answer that leaves the loop turns the work needs: the frame's
arrival (the batch checked, staged in the core and submitted to the journal there, in the batch's
first step), the journal's completion, and the batch's wake-up, where its answer is written. A
small batch that finds the journal idle is synced by the loop itself (``Journal._write_inline``):
then its first step runs to the end and writes the answer, in the frame's own turn.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from bkproto.v1 import bookie_pb2
from bookie.limits import PeerByteBudget, Reservation

if TYPE_CHECKING:
    from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest

log = logging.getLogger(__name__)


class AddStreamCarrier(Protocol):
    """What carries an add stream to and from its peer."""

    def write_answer(self, response: bookie_pb2.AddEntriesResponse) -> bool:
        """Send an answer; whether the carrier takes more now (False: wait for ``flush``)."""
        ...

    def room(self) -> None:
        """A message refused by ``offer`` may now be offered again."""
        ...

    def answered_all(self) -> None:
        """Every started batch is answered (the carrier may end a stream it stopped reading)."""
        ...

    def stop_reading(self) -> None:
        """Shutdown: take no new message; the started ones are still answered."""
        ...

    def broken(self, why: str) -> None:
        """A batch ended without an answer (it cannot happen short of a bug): the stream's order
        is lost, so the carrier ends it at once."""
        ...


class _Batch:
    """A batch's processing, a coroutine stepped by the futures it waits on rather than by a
    task: its first step runs in the step that offered the message (the adds are checked, staged
    in the core and submitted to the journal there, as a task's first step would one loop turn
    later), and each later step in the callback of the future it waited on. Nothing in the add
    path asks for its task (no ``asyncio.timeout``, no ``current_task``); a bare ``yield`` (the
    slices' ``asyncio.sleep(0)``) is stepped on the next loop turn, as a task would. The awaited
    future's callback keeps the batch referenced until it is done, its stream gone or not."""

    __slots__ = ("_coro", "_pipeline", "response", "size")

    def __init__(
        self,
        pipeline: AddPipeline,
        size: int,
        coro: Coroutine[Any, Any, bookie_pb2.AddEntriesResponse],
    ) -> None:
        self._pipeline = pipeline
        self._coro = coro
        self.size = size  # bytes held in both budgets (the in-progress ones until it is done)
        self.response: bookie_pb2.AddEntriesResponse | None = None

    def step(self, _done: object = None) -> None:
        try:
            awaited = self._coro.send(None)
        except StopIteration as stop:
            self._pipeline.finished(self, stop.value)
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - the stream ends, never the bookie
            self._pipeline.failed(self, exc)
            return
        if awaited is None:
            asyncio.get_running_loop().call_soon(self.step)
        else:
            awaited._asyncio_future_blocking = False  # as Task.__step: the await is taken over
            awaited.add_done_callback(self.step)


class AddPipeline:
    """One add stream of ``peer`` through ``handler``'s processing, window and byte budgets."""

    __slots__ = (
        "_carrier", "_closed", "_handler", "_held_budget", "_held_unanswered", "_peer", "_pending",
        "_queued", "_waiting_room", "_window",
    )  # fmt: skip

    def __init__(self, handler: AddEntriesHandler, peer: str, carrier: AddStreamCarrier, window: int) -> None:
        self._handler = handler
        self._peer = peer
        self._carrier = carrier
        self._window = window
        self._pending: deque[_Batch] = deque()  # started, not answered: in request order
        self._waiting_room = False  # a message was refused: tell the carrier when room comes
        # The bytes the budgets reserved for the message being offered, before it could start
        # (it waited for its turn in one budget, then the other), and the reservation it waits
        # for: one at a time.
        self._held_unanswered = 0
        self._held_budget = 0
        self._queued: Reservation | None = None
        self._closed = False

    @property
    def idle(self) -> bool:
        """No batch started and unanswered."""
        return not self._pending

    def offer(self, request: SizedAddEntriesRequest) -> bool:
        """Start ``request``'s batch if the window and the byte budgets have room now; False (the
        message not taken; :meth:`AddStreamCarrier.room` follows) if not."""
        if self._closed or self._queued is not None:
            return False  # a reservation in its turn calls room()
        if len(self._pending) >= self._window:
            self._waiting_room = True  # the next answer makes room
            return False
        handler, peer = self._handler, self._peer
        size = handler.message_cost(request)
        # Held until the answer is written: a peer that stops reading its answers stops being
        # read once its share is full, and holds no one else's.
        if not self._held_unanswered:
            if not handler.unanswered.try_acquire(peer, size):
                self._queue(handler.unanswered, size, unanswered=True)
                return False
            self._held_unanswered = size
        if not self._held_budget:
            if not handler.budget.try_acquire(peer, size):
                self._queue(handler.budget, size, unanswered=False)
                return False
            self._held_budget = size
        assert self._held_unanswered == self._held_budget == size, "the message offered changed"
        self._held_unanswered = self._held_budget = 0
        message = request.request
        batch = _Batch(self, size, handler.processor.process(message.adds, message.count_ok))
        self._pending.append(batch)
        batch.step()
        return True

    def finished(self, batch: _Batch, response: bookie_pb2.AddEntriesResponse) -> None:
        """A batch is durable (or refused): its answer goes out once those before it have."""
        # Released when the batch is done, not when its answer is taken: a client that stops
        # reading answers must not hold the bookie's processing budget.
        self._handler.budget.release(self._peer, batch.size)
        batch.response = response
        pending = self._pending
        if pending and pending[0] is batch:
            self.flush()

    def failed(self, batch: _Batch, exc: BaseException) -> None:
        self._handler.budget.release(self._peer, batch.size)
        log.error("add stream from %s: a batch ended without an answer: %r", self._peer, exc)
        if not self._closed:
            self._carrier.broken(f"a batch ended without an answer: {exc!r}")

    def flush(self) -> None:
        """Hand the finished answers at the head of the stream to the carrier, in order, while it
        takes them."""
        pending = self._pending
        unanswered = self._handler.unanswered
        while pending and not self._closed:
            batch = pending[0]
            response = batch.response
            if response is None:
                return
            pending.popleft()
            unanswered.release(self._peer, batch.size)
            more = self._carrier.write_answer(response)
            if self._waiting_room:
                self._waiting_room = False
                self._carrier.room()
            if not more:
                return
        if not pending and not self._closed:
            self._carrier.answered_all()

    def _queue(self, budget: PeerByteBudget, size: int, *, unanswered: bool) -> None:
        """Wait in ``budget``'s queue for the message's bytes (they do not fit, or others wait
        before them); the carrier is told when they are reserved."""
        self._queued = budget.reserve_later(self._peer, size, functools.partial(self._reserved, unanswered))

    def _reserved(self, unanswered: bool) -> None:
        queued, self._queued = self._queued, None
        assert queued is not None
        if unanswered:
            self._held_unanswered = queued.nbytes
        else:
            self._held_budget = queued.nbytes
        self._carrier.room()

    def stop_reading(self) -> None:
        self._carrier.stop_reading()

    def close(self) -> None:
        """The stream is gone: its unanswered batches still complete (their adds are staged; each
        is referenced by the future it waits on), but nothing is handed over; their bytes leave
        the unanswered budget now."""
        if self._closed:
            return
        self._closed = True
        handler = self._handler
        if self._queued is not None:
            self._queued.cancel()
            self._queued = None
        if self._held_unanswered:
            handler.unanswered.release(self._peer, self._held_unanswered)
        if self._held_budget:
            handler.budget.release(self._peer, self._held_budget)
        self._held_unanswered = self._held_budget = 0
        while self._pending:
            batch = self._pending.popleft()
            handler.unanswered.release(self._peer, batch.size)
        handler.pipeline_ended(self)
