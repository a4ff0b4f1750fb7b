"""One add in flight: its write set, which bookies acked it, and its result future.

The op sends the entry body to the Qw bookies of its write set and counts acks; at Qa acks it is
*completed*, but the application only hears about it when every earlier entry completed too (the
handle pops completed ops strictly in entry-id order). A failed or slow bookie is reported to the
handle, which replaces it (ensemble change) and asks the op to re-send that copy.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from bkproto.errors import BKError

from ..distribution import AckSet

if TYPE_CHECKING:
    from ..bookie_client import BookieClient
    from ..write_handle import WriteHandle


class PendingAddOp:
    __slots__ = (
        "ack_set",
        "completed",
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
        future: asyncio.Future[int],
    ) -> None:
        self.handle = handle
        self.entry_id = entry_id
        self.payload = payload
        self.size = len(payload)
        self.length = length  # cumulative ledger length including this entry
        self.future = future
        self.write_set = handle.distribution.write_set(entry_id)
        self.ack_set = AckSet(handle.distribution.ack_quorum)
        self.completed = False
        # The serialized AddRequest, built once at first send (its body carries the LAC of that
        # time) and shared by every bookie of the write set, including re-sends.
        self.encoded: bytes | None = None
        self.sent_at = 0.0

    @property
    def sent(self) -> bool:
        return self.encoded is not None

    def send(self, encoded: bytes, ensemble: list[str], clients: list[BookieClient], now: float) -> None:
        self.encoded = encoded
        self.sent_at = now
        for index in self.write_set:
            self._send_to(index, ensemble[index], clients[index])

    def _send_to(self, index: int, bookie_id: str, client: BookieClient) -> None:
        assert self.encoded is not None
        client.add_encoded(self.encoded, partial(self._on_response, index, bookie_id))

    def _on_response(self, index: int, bookie_id: str, error: BKError | None) -> None:
        handle = self.handle
        if self.future.done():  # failed with the handle, or answered twice after a re-send
            return
        if handle.ensemble[index] != bookie_id:
            return  # a replaced bookie answering late: its copy no longer counts
        if error is not None:
            handle.bookie_failed(index, bookie_id, error)
            return
        if self.ack_set.complete_bookie(index) and not self.completed:
            self.completed = True
            handle.add_completed(self)

    def unacked_indices(self) -> list[int]:
        return [i for i in self.write_set if not self.ack_set.has_acked(i)]

    def resend(self, index: int, bookie_id: str, client: BookieClient, now: float) -> None:
        """After bookie ``index`` was replaced: forget its ack and send the copy to the new one."""
        if not self.sent or index not in self.write_set or self.future.done():
            return
        self.ack_set.remove_bookie(index)
        self.completed = self.ack_set.complete
        self.sent_at = now
        self._send_to(index, bookie_id, client)
