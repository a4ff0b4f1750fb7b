"""The add path of one bookie connection: requests serialized without protobuf objects, and the
coalescing AddEntries stream that carries them.

A write handle queues its entries as their bodies; a message packs the bodies of one ledger into
one ``PackedAdds`` group (entry ids, sizes, the bodies joined: the bookie reads a handful of fields
per group instead of six per add). A lone add, and adds given already serialized (recovery adds,
tools), travel as ``adds`` elements.

A Python gRPC message costs hundreds of microseconds of CPU while an entry's own work costs a few,
so every add queued while the previous stream message was being written goes into the next message
(natural batching: the busier the connection, the bigger the batches). How many messages may wait
for their response, and how often one may leave, depends on whether the bookie is behind: at least
``behind_min_adds`` adds queued up for it while its previous message was out (counted when that
answer arrives, before any holding back, so a wait never feeds itself). Then at most
``max_inflight_messages`` messages are out, and one leaves at most every ``min_batch_interval_s``:
a bookie that answers fast would otherwise be sent a message per round trip, each a few entries,
and on a busy host the per-message CPU is what makes the latency. Otherwise (adds trickle in, a
few per round trip) up to ``max_inflight_messages_keeping_up`` messages may be out and none is held
back: an add, and the LAC it carries to tailing readers, need not wait for the previous message's
round trip. BookKeeper's journal groups the same way: only what queued while it was busy. Past the
window, adds accumulate in the queue (bounded upstream by the write handle's outstanding-adds/bytes
limits) and leave in the next message. An add that finds the sender parked with nothing queued,
and nothing that would hold it, leaves in its caller's own step when the call can write at once
(the add port's): a writer's lone add does not wait a loop turn for the sender task.

Responses come back one per request message, in order: the receiver pops the oldest in-flight
batch and completes its adds (aiokafka's multiplexed in-flight requests). Every message asks the
bookie to answer its leading successes as a count (``count_ok``), so the usual answer is one
number, and its adds complete with one call per listener rather than one per add; the adds after
the count (and every add, from a bookie that ignores the flag) have a status each. If the stream
breaks, every add in flight or queued fails; the owner then opens a new stream for the next add.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from array import array
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc.aio

from bkproto.add_port import FRAME_HEADER, frame
from bkproto.entry_format import HEADER
from bkproto.errors import (
    BKError,
    BookieUnavailableError,
    ClientClosedError,
    UnexpectedConditionError,
    error_for_status,
)
from bkproto.v1 import bookie_pb2
from bkproto.wire import COUNT_OK, varint

from .digest import DigestManager
from .rpc_errors import run_stream_loop
from .transport import AddCallback, AddListener

if TYPE_CHECKING:
    from .bookie_client import BookieClientOptions

log = logging.getLogger(__name__)

EOK = bookie_pb2.EOK

# The packed group's fixed-width arrays, little-endian on the wire (sfixed64 ids, fixed32 sizes).
_IDS_TYPE = "q"
_SIZES_TYPE = next(code for code in "IL" if array(code).itemsize == 4)
_SWAP = sys.byteorder == "big"


class AddRequestEncoder:
    """Wire bytes of ``AddEntriesRequest`` adds of one ledger, without protobuf objects: one add
    as an ``adds`` element (:meth:`encode`), or adds given as their bodies as one ``packed`` group
    (:meth:`pack`).

    A repeated field is just its elements concatenated, so a stream message is the elements (or
    groups) of its adds joined. Building protobuf messages per add and per bookie cost more CPU
    than everything else a client does for an entry. The bytes equal ``SerializeToString`` of the
    message (proto3: zero-valued fields omitted), which the unit tests check."""

    __slots__ = ("_group_fields", "_key", "_ledger")

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        self._ledger = b"\x08" + varint(ledger_id) if ledger_id else b""
        self._key = b"\x1a" + varint(len(master_key)) + master_key if master_key else b""
        # PackedAdds' ledger id (field 1) and master key (field 2); flags stay 0, so absent.
        self._group_fields = self._ledger + (b"\x12" + self._key[1:] if master_key else b"")

    def encode(self, entry_id: int, body: bytes, recovery: bool = False, trailer: bytes = b"") -> bytes:
        """``adds`` field 1 framing (tag, length) + the AddRequest message, then ``trailer`` (a
        message's own fields, e.g. :data:`~bkproto.wire.COUNT_OK`, joined in the same copy)."""
        size = len(body)
        fields = (self._ledger + b"\x10" + varint(entry_id)) if entry_id else self._ledger
        fields += self._key
        if size:
            fields += b"\x22" + varint(size)
        flags = b"\x28\x01" if recovery else b""  # flags = RECOVERY_ADD
        return b"".join((b"\x0a", varint(len(fields) + size + len(flags)), fields, body, flags, trailer))

    def pack(
        self, entry_ids: Sequence[int], bodies: Sequence[bytes], trailer: bytes = b"", framed: bool = False
    ) -> bytes:
        """``packed`` field 2 framing + the PackedAdds group of entries ``entry_ids`` with bodies
        ``bodies`` (at least one; no flags), then ``trailer`` (as :meth:`encode`'s). The ids and
        sizes are packed in C (``array``) and the bodies copied once, straight into the result;
        ``framed``: the add port's length header first, in that same copy (``frame`` would copy
        the whole message again)."""
        count = len(entry_ids)
        ids = array(_IDS_TYPE, entry_ids)
        sizes = array(_SIZES_TYPE, map(len, bodies))
        if _SWAP:
            ids.byteswap()
            sizes.byteswap()
        total = sum(sizes)
        head = b"".join((
            self._group_fields,
            b"\x2a", varint(8 * count), ids,  # entry_ids, field 5, packed
            b"\x32", varint(4 * count), sizes,  # body_sizes, field 6, packed
            b"\x3a" + varint(total) if total else b"",  # bodies, field 7
        ))
        group_size = varint(len(head) + total)
        parts = [b"\x12", group_size, head]
        if framed:
            size = 1 + len(group_size) + len(head) + total + len(trailer)
            parts.insert(0, FRAME_HEADER.pack(size))
        parts += bodies
        parts.append(trailer)
        return b"".join(parts)


class LedgerAddRequestEncoder(AddRequestEncoder):
    """:class:`AddRequestEncoder` of a write handle's entries, which also builds each entry's
    body: the header packed and digested, and the payload copied once. The body is the one
    thing an entry's copies to its Qw bookies share; each bookie's stream message then joins
    the bodies of its adds into a packed group (or frames a lone one as an ``adds`` element)."""

    __slots__ = ("_digest", "_header", "_ledger_id", "encode_bodies")

    def __init__(self, ledger_id: int, digest: DigestManager) -> None:
        super().__init__(ledger_id, digest.master_key)
        self._ledger_id = ledger_id
        self._header = HEADER.pack
        self._digest = digest.digest_function
        # The bodies of a batch of entries, as encode_body makes each (DigestManager.encode_entries).
        self.encode_bodies = digest.encode_entries

    def encode_body(self, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """The body of entry ``entry_id`` (``lac``: the LAC it carries; ``length``: the ledger's
        length including it): header || digest || payload, as ``DigestManager.encode_entry``."""
        header = self._header(self._ledger_id, entry_id, lac, length)
        return b"".join((header, self._digest(header, payload), payload))


class CallbackListener:
    """Adapts a plain completion callback to :class:`AddListener`."""

    __slots__ = ("_callback",)

    def __init__(self, callback: AddCallback) -> None:
        self._callback = callback

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        self._callback(error)

    def adds_completed(self, bookie_id: str, tokens: Sequence[int]) -> None:
        for _ in tokens:
            self._callback(None)


# The adds of one stream message, in order: who to tell and with which token.
_Batch = tuple[list[AddListener], list[int]]


def _notify(listener: AddListener, token: int, bookie_id: str, error: BKError | None) -> None:
    try:
        listener.add_complete(bookie_id, token, error)
    except Exception:  # one broken listener must not strand the other adds of the batch
        log.exception("add completion callback failed")


def _notify_all_acked(listeners: list[AddListener], tokens: list[int], bookie_id: str) -> None:
    """Every add of one answer message succeeded: one ``adds_completed`` per run of adds queued
    with the same listener (a message of one write handle's slot: one call in all)."""
    first = listeners[0]
    runs: list[tuple[AddListener, list[int]]]
    if len(set(map(id, listeners))) == 1:
        runs = [(first, tokens)]
    else:
        runs = []
        start = 0
        for i in range(1, len(listeners)):
            if listeners[i] is not listeners[start]:
                runs.append((listeners[start], tokens[start:i]))
                start = i
        runs.append((listeners[start], tokens[start:]))
    for listener, run in runs:
        try:
            listener.adds_completed(bookie_id, run)
        except Exception:  # one broken listener must not strand the other adds of the batch
            log.exception("add completion callback failed")


def mixed_message(
    parts: list[bytes],
    packers: list[AddRequestEncoder | None],
    listeners: list[AddListener],
    tokens: list[int],
) -> tuple[bytes, _Batch]:
    """The message of adds of several ledgers, or with ``adds`` elements among them, and its adds
    in the order the bookie answers them: the ``adds`` elements first (a ledger's lone body
    framed as one), then a packed group per ledger, in the order each first appears; the
    message asks for its successes as a count (``count_ok``)."""
    groups: dict[AddRequestEncoder, list[int]] = {}
    for index, packer in enumerate(packers):
        if packer is not None:
            groups.setdefault(packer, []).append(index)
    order = [i for i, packer in enumerate(packers) if packer is None or len(groups[packer]) == 1]
    pieces = [
        parts[i] if (packer := packers[i]) is None else packer.encode(tokens[i], parts[i]) for i in order
    ]
    for packer, indexes in groups.items():
        if len(indexes) > 1:
            pieces.append(packer.pack([tokens[i] for i in indexes], [parts[i] for i in indexes]))
            order += indexes
    pieces.append(COUNT_OK)
    return b"".join(pieces), ([listeners[i] for i in order], [tokens[i] for i in order])


class AddStream:
    """One AddEntries bidi stream: a sender task coalescing queued adds, a receiver task
    completing them. Lives until the stream fails or the client closes; never restarts.

    Queued adds live in three parallel deques rather than one tuple each: with thousands of
    adds outstanding, every long-lived object per add costs garbage-collector time."""

    def __init__(
        self,
        bookie_id: str,
        options: BookieClientOptions,
        call: Any,
        on_failed: Callable[[AddStream], None],
    ) -> None:
        self._bookie_id = bookie_id
        self._call = call
        self._options = options
        self._on_failed = on_failed
        # Per queued add: an ``adds`` element (packer None), or the body of an entry of the
        # packer's ledger (token = entry id), which the message packs with its ledger's others.
        self._queued_bytes: deque[bytes] = deque()
        self._queued_size = 0  # bytes in _queued_bytes
        self._queued_packers: deque[AddRequestEncoder | None] = deque()
        self._queued_listeners: deque[AddListener] = deque()
        self._queued_tokens: deque[int] = deque()
        self._inflight: deque[_Batch] = deque()
        # Adds queued when the last answer came: what arrived during that round trip (a message
        # takes all that is queued, up to its byte budget). The sender holds back only past it.
        self._queued_at_answer = 0
        self._wakeup = asyncio.Event()
        self._window = asyncio.Event()
        self._window.set()
        self.failed = False
        self.messages_sent = 0
        # The sender is parked with nothing queued: an add may then leave in its enqueuer's step
        # (_send_at_once) when the call can write without waiting (the add port's; not gRPC's).
        self._sender_idle = False
        self._ready_to_write: Callable[[], bool] | None = getattr(call, "ready_to_write", None)
        # The add port's call takes messages with their length header, built in the same copy.
        self._framed = hasattr(call, "write_framed")
        self._write: Callable[[bytes], Awaitable[None]] = call.write_framed if self._framed else call.write
        self._write_nowait: Callable[[bytes], None] | None = getattr(
            call, "write_framed_nowait" if self._framed else "write_nowait", None
        )
        self._last_sent = -options.min_batch_interval_s  # loop time of the last message sent
        self._sender = asyncio.create_task(
            run_stream_loop(self._send_loop, self.fail, bookie_id, "add"), name=f"bk-add-send-{bookie_id}"
        )
        self._receiver = asyncio.create_task(
            run_stream_loop(self._recv_loop, self.fail, bookie_id, "add"), name=f"bk-add-recv-{bookie_id}"
        )

    def enqueue(self, encoded: bytes, listener: AddListener, token: int) -> None:
        self._queued_bytes.append(encoded)
        self._queued_size += len(encoded)
        self._queued_packers.append(None)
        self._queued_listeners.append(listener)
        self._queued_tokens.append(token)
        if not (self._sender_idle and self._send_at_once()):
            self._wakeup.set()

    def _send_at_once(self) -> bool:
        """Send what is queued now, in the enqueuer's step, if the sender would send it at once
        on waking (the window has room, the bookie is not behind, so no hold) and the call can
        write without waiting: the sender's loop turn per message is saved, which at a message
        per add is a share of the add's latency and of the client's CPU. True if sent."""
        options = self._options
        if (
            self._ready_to_write is None
            or self._queued_at_answer >= options.behind_min_adds
            or len(self._inflight)
            >= max(options.max_inflight_messages, options.max_inflight_messages_keeping_up)
            or not self._ready_to_write()
        ):
            return False
        request, batch = self._take_batch()
        self._inflight.append(batch)  # the answer can only follow the write, in this same step
        assert self._write_nowait is not None  # a call with ready_to_write has it
        self._write_nowait(request)
        self._last_sent = asyncio.get_running_loop().time()
        self.messages_sent += 1
        return True

    def enqueue_bodies(
        self,
        packer: AddRequestEncoder,
        bodies: Sequence[bytes],
        listener: AddListener,
        entry_ids: Sequence[int],
    ) -> None:
        """Queue entries ``entry_ids`` of ``packer``'s ledger, given as their bodies (tokens: the
        entry ids), in order: a message packs the bodies of one ledger into one group. A lone
        add may leave at once, as with :meth:`enqueue`."""
        self._queued_bytes.extend(bodies)
        self._queued_size += sum(map(len, bodies))
        self._queued_packers.extend(itertools.repeat(packer, len(entry_ids)))
        self._queued_listeners.extend(itertools.repeat(listener, len(entry_ids)))
        self._queued_tokens.extend(entry_ids)
        if not (len(entry_ids) == 1 and self._sender_idle and self._send_at_once()):
            self._wakeup.set()

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._options.min_batch_interval_s
        behind = self._options.behind_min_adds
        window = self._options.max_inflight_messages
        keeping_up = max(window, self._options.max_inflight_messages_keeping_up)
        while True:
            if not self._queued_bytes:
                self._sender_idle = True
                try:
                    await self._wakeup.wait()
                finally:
                    self._sender_idle = False
            self._wakeup.clear()
            while self._queued_bytes:
                while len(self._inflight) >= (window if self._queued_at_answer >= behind else keeping_up):
                    self._window.clear()
                    await self._window.wait()
                if self._queued_at_answer >= behind:  # the bookie is behind: a fuller message pays
                    delay = self._last_sent + interval - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if not self._queued_bytes:
                    break  # sent at once by enqueue meanwhile
                request, batch = self._take_batch()
                # In flight before the write: a response can only follow the write.
                self._inflight.append(batch)
                self._last_sent = loop.time()
                await self._write(request)
                self.messages_sent += 1

    def _take_batch(self) -> tuple[bytes, _Batch]:
        """The next message (a serialized AddEntriesRequest, ``count_ok`` set) and the adds it
        carries, in the order the bookie answers them."""
        queue = self._queued_bytes
        budget = self._options.max_batch_bytes
        if self._queued_size <= budget:  # all of it (the usual message), without a pass per add
            count = len(queue)
            self._queued_size = 0
        else:
            count = 1  # always at least one, even if it alone exceeds the budget
            size = len(queue[0])
            for encoded in itertools.islice(queue, 1, None):
                if size + len(encoded) > budget:
                    break
                size += len(encoded)
                count += 1
            self._queued_size -= size
        if count == len(queue):
            parts = list(queue)
            packers = list(self._queued_packers)
            listeners = list(self._queued_listeners)
            tokens = list(self._queued_tokens)
            queue.clear()
            self._queued_packers.clear()
            self._queued_listeners.clear()
            self._queued_tokens.clear()
        else:
            popleft = queue.popleft
            parts = [popleft() for _ in range(count)]
            pop_packer = self._queued_packers.popleft
            packers = [pop_packer() for _ in range(count)]
            pop_listener = self._queued_listeners.popleft
            listeners = [pop_listener() for _ in range(count)]
            pop_token = self._queued_tokens.popleft
            tokens = [pop_token() for _ in range(count)]
        first = packers[0]
        if first is not None and count > 1 and packers.count(first) == count:
            # the usual message: entries of one ledger, framed (if so) in the same copy
            return first.pack(tokens, parts, COUNT_OK, self._framed), (listeners, tokens)
        if first is None and packers.count(None) == count:  # all ``adds`` elements already
            parts.append(COUNT_OK)
            message, batch = b"".join(parts), (listeners, tokens)
        elif first is not None and count == 1:
            message, batch = first.encode(tokens[0], parts[0], trailer=COUNT_OK), (listeners, tokens)
        else:
            message, batch = mixed_message(parts, packers, listeners, tokens)
        return (frame(message) if self._framed else message), batch

    async def _recv_loop(self) -> None:
        bookie_id = self._bookie_id
        while True:
            response = await self._call.read()
            if response is grpc.aio.EOF:  # type: ignore[attr-defined]
                self.fail(BookieUnavailableError(f"bookie {bookie_id}: add stream closed by bookie"))
                return
            if not self._inflight:
                self.fail(UnexpectedConditionError(f"bookie {bookie_id}: response without request"))
                return
            listeners, tokens = self._inflight.popleft()
            self._queued_at_answer = len(self._queued_bytes)
            self._window.set()
            # The first ``ok`` adds succeeded; ``results`` answers the rest, one each (all of
            # them from a bookie that predates ok_count).
            ok = response.ok_count
            results = response.results
            if ok + len(results) != len(listeners):
                self.fail(
                    UnexpectedConditionError(
                        f"bookie {bookie_id}: {ok} adds counted and {len(results)} results"
                        f" for {len(listeners)} adds"
                    )
                )
                bad = BookieUnavailableError(f"bookie {bookie_id}: bad response")
                for listener, token in zip(listeners, tokens, strict=True):
                    _notify(listener, token, bookie_id, bad)
                return
            if ok:
                if not results:  # the common case: all counted, completed in bulk
                    _notify_all_acked(listeners, tokens, bookie_id)
                    continue
                _notify_all_acked(listeners[:ok], tokens[:ok], bookie_id)
                listeners, tokens = listeners[ok:], tokens[ok:]
            statuses = [result.status for result in results]
            if statuses.count(EOK) == len(statuses):  # all succeeded, answered one by one
                _notify_all_acked(listeners, tokens, bookie_id)
                continue
            for listener, token, result, status in zip(listeners, tokens, results, statuses, strict=True):
                if status == EOK:
                    _notify(listener, token, bookie_id, None)
                else:
                    _notify(listener, token, bookie_id, error_for_status(status, result.message))

    def fail(self, error: BKError) -> None:
        """Fail every add in flight or queued, stop both tasks, cancel the call. Idempotent."""
        if self.failed:
            return
        self.failed = True
        self._on_failed(self)
        if not isinstance(error, ClientClosedError):
            log.info("%s", error)
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not current:
                task.cancel()
        self._call.cancel()
        listeners: list[AddListener] = []
        tokens: list[int] = []
        for batch_listeners, batch_tokens in self._inflight:
            listeners += batch_listeners
            tokens += batch_tokens
        listeners += self._queued_listeners
        tokens += self._queued_tokens
        self._inflight.clear()
        self._queued_bytes.clear()
        self._queued_size = 0
        self._queued_packers.clear()
        self._queued_listeners.clear()
        self._queued_tokens.clear()
        bookie_id = self._bookie_id
        for listener, token in zip(listeners, tokens, strict=True):
            _notify(listener, token, bookie_id, error)

    async def wait_closed(self) -> None:
        await asyncio.gather(self._sender, self._receiver, return_exceptions=True)
