"""One add in flight, and the listeners its bookies' answers come back through.

An op goes to the Qw bookies of its write set, which ack it; at Qa acks it is *completed*, but the
application only hears about it when every earlier entry completed too (the handle pops completed
ops strictly in entry-id order). A failed or slow bookie is reported to the handle, which replaces
it (ensemble change) and asks the op to re-send that copy.

Adds leave per batch too: :func:`send_adds` encodes the bodies of the adds a write handle sent in
one loop turn in one pass and queues each bookie its share in one call
(``BookieConnection.add_bodies``: its stream packs them into one group per message).

Answers are counted per bookie per answer message, not per entry: every add of a write handle is
queued with the :class:`EnsembleSlotListener` of its bookie's slot in the ensemble (token = entry
id), so a stream answer carrying hundreds of acks reaches the handle in one call
(``WriteHandle.adds_acked``) instead of a chain of calls per entry and bookie.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from itertools import compress, cycle
from operator import attrgetter
from typing import TYPE_CHECKING

from bkproto.errors import BKError, IncorrectParameterError

log = logging.getLogger(__name__)

# Completion callback of ``append_with_callback``: (entry id, None) or (entry id, error).
AddCompletion = Callable[[int, BKError | None], None]

if TYPE_CHECKING:
    from ..add_stream import LedgerAddRequestEncoder
    from ..distribution import RoundRobinDistribution
    from ..transport import BookieConnection
    from ..write_handle import WriteHandle


class EnsembleSlotListener:
    """The :class:`bkclient.transport.AddListener` of one ensemble slot (bookie index) of a write
    handle. Tokens are entry ids. The slot, not the bookie, is fixed: the handle checks that the
    bookie answering still holds the slot (a replaced bookie's late acks do not count)."""

    __slots__ = ("_handle", "_index")

    def __init__(self, handle: WriteHandle, index: int) -> None:
        self._handle = handle
        self._index = index

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        if error is None:
            self._handle.adds_acked(self._index, bookie_id, (token,))
        else:
            self._handle.add_refused(self._index, bookie_id, token, error)

    def adds_completed(self, bookie_id: str, tokens: Sequence[int]) -> None:
        self._handle.adds_acked(self._index, bookie_id, tokens)


class PendingAddOp:
    """The state of one add: which bookies acked it (a bit mask: an add in flight allocates no
    per-bookie objects, which matters when thousands are outstanding and the garbage collector
    walks every live object) and whom to tell when it completes. Success is told by
    ``WriteHandle._release_completed`` itself (once per entry, so inlined there); failure here."""

    __slots__ = (
        "acked",
        "body",
        "callback",
        "completed",
        "done",
        "entry_id",
        "future",
        "length",
        "payload",
        "sent_at",
        "size",
        "write_set",
    )

    def __init__(
        self,
        entry_id: int,
        payload: bytes,
        length: int,
        write_set: tuple[int, ...],
        future: asyncio.Future[int] | None,
        callback: AddCompletion | None = None,
    ) -> None:
        self.entry_id = entry_id
        self.payload = payload
        self.size = len(payload)
        self.length = length  # cumulative ledger length including this entry
        self.future = future  # append_async's result, or None when ``callback`` is used
        self.callback = callback
        self.done = False  # the application was told (success or failure)
        self.write_set = write_set
        self.acked = 0  # bit i set: ensemble[i] acknowledged
        self.completed = False
        # The entry's body (header || digest || payload), built once at first send
        # (``WriteHandle._send``; it carries the LAC of that time) and shared by every bookie of
        # the write set, re-sends too.
        self.body: bytes | None = None
        self.sent_at = 0.0

    @property
    def sent(self) -> bool:
        return self.body is not None

    def unacked_indices(self) -> list[int]:
        return [i for i in self.write_set if not self.acked & (1 << i)]

    def resend(
        self,
        index: int,
        client: BookieConnection,
        listener: EnsembleSlotListener,
        encoder: LedgerAddRequestEncoder,
        ack_quorum: int,
        now: float,
    ) -> None:
        """After bookie ``index`` was replaced: forget its ack and send the copy to the new one."""
        if self.body is None or index not in self.write_set or self.done:
            return
        self.acked &= ~(1 << index)
        self.completed = self.acked.bit_count() >= ack_quorum
        self.sent_at = now
        client.add_bodies(encoder, (self.body,), listener, (self.entry_id,))

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


_DONE = attrgetter("done")  # PendingAddOp's, read in C
_ENTRY_ID = attrgetter("entry_id")
_LENGTH = attrgetter("length")
_PAYLOAD = attrgetter("payload")


def send_adds(
    ops: Sequence[PendingAddOp],
    encoder: LedgerAddRequestEncoder,
    lac: int,
    sent_at: float,
    distribution: RoundRobinDistribution,
    clients: Sequence[BookieConnection],
    listeners: Sequence[EnsembleSlotListener],
) -> None:
    """Encode the bodies of ``ops`` (each carrying ``lac``) and queue each to the bookies of its
    write set: ``clients[i]`` (ensemble slot ``i``) gets its share in one ``add_bodies`` call, in
    the order of ``ops``. Ops already done (failed meanwhile) are skipped."""
    if len(ops) == 1:  # a lone add
        op = ops[0]
        if op.done:
            return
        entry_id = op.entry_id
        body = op.body = encoder.encode_body(entry_id, lac, op.length, op.payload)
        op.sent_at = sent_at
        one_body, one_id = (body,), (entry_id,)
        for index in op.write_set:
            clients[index].add_bodies(encoder, one_body, listeners[index], one_id)
        return
    if any(map(_DONE, ops)):
        ops = [op for op in ops if not op.done]
        if not ops:
            return
    entry_ids = list(map(_ENTRY_ID, ops))
    parts = encoder.encode_bodies(entry_ids, lac, map(_LENGTH, ops), map(_PAYLOAD, ops))
    for op, body in zip(ops, parts, strict=True):
        op.body = body
        op.sent_at = sent_at
    ensemble_size = distribution.ensemble_size
    write_quorum = distribution.write_quorum
    if write_quorum == ensemble_size:  # every bookie stores every entry
        for index in range(ensemble_size):
            clients[index].add_bodies(encoder, parts, listeners[index], entry_ids)
        return
    first = entry_ids[0] if entry_ids else 0
    consecutive = entry_ids == list(range(first, first + len(entry_ids)))  # an append handle's
    for index in range(ensemble_size):
        if consecutive:
            # Which of the entries first, first+1, ... bookie ``index`` stores repeats every E
            # entries (RoundRobinDistribution.has_entry): picked in C by a cycled pattern.
            pattern = [(index - first - k) % ensemble_size < write_quorum for k in range(ensemble_size)]
            slot_ids = list(compress(entry_ids, cycle(pattern)))
            slot_parts = list(compress(parts, cycle(pattern)))
        else:  # a ledger-adv handle's ids, in any order
            slot_ids = [e for e in entry_ids if (index - e) % ensemble_size < write_quorum]
            slot_parts = [
                p for p, e in zip(parts, entry_ids, strict=True) if (index - e) % ensemble_size < write_quorum
            ]
        if slot_ids:
            clients[index].add_bodies(encoder, slot_parts, listeners[index], slot_ids)


def checked_payloads(
    ledger_id: int, payloads: Sequence[bytes], max_payload: int
) -> tuple[list[bytes], list[int]]:
    """A batch of appends checked whole at the API's boundary: ``payloads`` must be a non-empty
    list or tuple of bytes-like payloads of at most ``max_payload`` bytes each (the limit an
    entry's header and digest leave); returns them as bytes, and their sizes. Raises
    IncorrectParameterError naming the first payload at fault."""
    if not isinstance(payloads, list | tuple):
        raise IncorrectParameterError(
            f"ledger {ledger_id}: a batch is a list or tuple of payloads, got {type(payloads).__name__}"
        )
    if not payloads:
        raise IncorrectParameterError(f"ledger {ledger_id}: an empty batch")
    batch: list[bytes] = []
    if set(map(type, payloads)) == {bytes}:  # the usual batch, checked in C
        batch = list(payloads)
    else:
        for index, data in enumerate(payloads):
            if type(data) is bytes:
                batch.append(data)
            elif isinstance(data, bytearray | memoryview):
                batch.append(bytes(data))
            else:
                raise IncorrectParameterError(
                    f"ledger {ledger_id}: payload {index} of the batch is a {type(data).__name__}, not bytes"
                )
    sizes = list(map(len, batch))
    largest = max(sizes)
    if largest > max_payload:
        raise IncorrectParameterError(
            f"ledger {ledger_id}: payload {sizes.index(largest)} of the batch is {largest} bytes, over the"
            f" {max_payload}-byte limit (ClientConfig.max_entry_size_bytes less header and digest)"
        )
    return batch, sizes


def adds_that_would_wait(sizes: list[int], adds: int, total: int, max_adds: int, max_bytes: int) -> int:
    """How many of a batch of adds of ``sizes`` would wait for room, appended to a handle with
    ``adds`` adds of ``total`` bytes outstanding and none waiting, under ``max_adds`` and
    ``max_bytes`` (``WriteHandle._add``'s rule: one add always goes when none is outstanding;
    once one waits, the later ones wait behind it)."""
    if adds + len(sizes) <= max_adds and total + sum(sizes) <= max_bytes:
        return 0  # all fit (the usual case, checked in C)
    for index, size in enumerate(sizes):
        if adds and (adds >= max_adds or total + size > max_bytes):
            return len(sizes) - index
        adds += 1
        total += size
    return 0
