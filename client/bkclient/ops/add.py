"""One add in flight: its write set, which bookies acked it, and its result future.

The op sends the entry body to the Qw bookies of its write set and counts acks; at Qa acks it is
*completed*, but the application only hears about it when every earlier entry completed too (the
handle pops completed ops strictly in entry-id order). A failed or slow bookie is reported to the
handle, which replaces it (ensemble change) and asks the op to re-send that copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bkproto.errors import BKError

log = logging.getLogger(__name__)

# Completion callback of ``append_with_callback``: (entry id, None) or (entry id, error).
AddCompletion = Callable[[int, BKError | None], None]

if TYPE_CHECKING:
    from ..transport import BookieConnection
    from ..write_handle import WriteHandle


class PendingAddOp:
    """Listens for its copies' acks itself (``add_complete``; token = bookie index) and keeps
    them in a bit mask: an add in flight allocates no per-bookie objects, which matters when
    thousands are outstanding (the garbage collector walks every live object)."""

    __slots__ = (
        "acked",
        "callback",
        "completed",
        "done",
        "encoded",
        "entry_id",
        "future",
        "handle",
        "length",
        "payload",
        "sent_at",
        "size",
        "write_set",
    )

    def __init__(
        self,
        handle: WriteHandle,
        entry_id: int,
        payload: bytes,
        length: int,
        future: asyncio.Future[int] | None,
        callback: AddCompletion | None = None,
    ) -> None:
        self.handle = handle
        self.entry_id = entry_id
        self.payload = payload
        self.size = len(payload)
        self.length = length  # cumulative ledger length including this entry
        self.future = future  # append_async's result, or None when ``callback`` is used
        self.callback = callback
        self.done = False  # the application was told (success or failure)
        self.write_set = handle.distribution.write_set(entry_id)
        self.acked = 0  # bit i set: ensemble[i] acknowledged
        self.completed = False
        # The serialized AddRequest, built once at first send (its body carries the LAC of that
        # time) and shared by every bookie of the write set, including re-sends.
        self.encoded: bytes | None = None
        self.sent_at = 0.0

    @property
    def sent(self) -> bool:
        return self.encoded is not None

    def send(self, encoded: bytes, clients: list[BookieConnection], now: float) -> None:
        self.encoded = encoded
        self.sent_at = now
        for index in self.write_set:
            clients[index].add_encoded(encoded, self, index)

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        handle = self.handle
        if self.done:  # failed with the handle, or answered twice after a re-send
            return
        if handle.ensemble[token] != bookie_id:
            return  # a replaced bookie answering late: its copy no longer counts
        if error is not None:
            handle.bookie_failed(token, bookie_id, error)
            return
        self.acked |= 1 << token
        if not self.completed and self.acked.bit_count() >= handle.distribution.ack_quorum:
            self.completed = True
            handle.add_completed(self)

    def unacked_indices(self) -> list[int]:
        return [i for i in self.write_set if not self.acked & (1 << i)]

    def resend(self, index: int, client: BookieConnection, now: float) -> None:
        """After bookie ``index`` was replaced: forget its ack and send the copy to the new one."""
        if self.encoded is None or index not in self.write_set or self.done:
            return
        self.acked &= ~(1 << index)
        self.completed = self.acked.bit_count() >= self.handle.distribution.ack_quorum
        self.sent_at = now
        client.add_encoded(self.encoded, self, index)

    def succeed(self) -> None:
        self.done = True
        if self.future is not None and not self.future.done():  # the caller may have cancelled it
            self.future.set_result(self.entry_id)
        if self.callback is not None:
            self._call_back(None)

    def fail(self, error: BKError) -> None:
        self.done = True
        if self.future is not None and not self.future.done():
            self.future.set_exception(type(error)(error.message))  # one instance per awaiting caller
        if self.callback is not None:
            self._call_back(error)

    def _call_back(self, error: BKError | None) -> None:
        assert self.callback is not None
        try:
            self.callback(self.entry_id, error)
        except Exception:  # the writer's bookkeeping must survive a broken application callback
            log.exception("add completion callback for entry %d failed", self.entry_id)
