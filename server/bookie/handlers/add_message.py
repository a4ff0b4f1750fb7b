"""The adds of one AddEntries message, in answer order, whichever form they came in.

An ``AddEntriesRequest`` carries adds one ``AddRequest`` each (``adds``) and packed groups of one
ledger (``packed``: a ledger id, a key and flags once, then the entry ids, the body sizes and the
bodies joined). Reading six protobuf fields per add was the largest per-entry step of the bookie's
handler; a group is read in a handful of field reads and its bodies are sliced apart in C-level
passes. :class:`MessageAdds` presents both as one sequence of adds, in the order the answer
gives them (every ``adds`` element, then each group's adds), so the batch processor slices and
answers a message the same way whatever its form.

A group is unpacked when the message is decoded: a message of groups alone straight from its
bytes (:func:`packed_only`, each body sliced out of the message), any other through protobuf
(:func:`decoded`, :func:`unpack_group`; the protobuf message is kept only for its per-add
``adds``). Its ``AddOp``\\ s are built later, slice by slice, by :meth:`MessageAdds.ops`.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, islice, repeat
from typing import NamedTuple, overload

from bkmeta.serde import decode_varint
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp

EBADREQ = bookie_pb2.EBADREQ
RECOVERY_ADD = bookie_pb2.RECOVERY_ADD
DEFERRED_SYNC = bookie_pb2.DEFERRED_SYNC

# Why each add of a slice is refused before it reaches the core: index in the slice -> (status, message).
Refusals = dict[int, tuple[int, str]]


class PackedGroup(NamedTuple):
    """One ``PackedAdds`` group, unpacked: its adds' bodies as separate bytes."""

    ledger_id: int
    master_key: bytes
    recovery: bool
    deferred_sync: bool
    entry_ids: list[int]
    bodies: list[bytes]  # one per entry id; empty when the group is refused
    refusal: str  # why the whole group is refused (EBADREQ), "" when it is well formed


def unpack_group(group: bookie_pb2.PackedAdds) -> PackedGroup:
    """The group (as protobuf parsed it) with its bodies sliced apart; see :func:`_unpacked`."""
    bodies = group.bodies
    return _unpacked(
        group.ledger_id, group.master_key, group.flags, group.write_flags, list(group.entry_ids),
        list(group.body_sizes), bodies, 0, len(bodies),
    )  # fmt: skip


def _unpacked(
    ledger_id: int,
    master_key: bytes,
    flags: int,
    write_flags: int,
    entry_ids: list[int],
    sizes: list[int],
    source: bytes,
    start: int,
    end: int,
) -> PackedGroup:
    """A group whose bodies are ``source[start:end]``, sliced apart by the accumulated sizes in
    C-level passes; a group whose counts or sizes do not match its bodies is kept, with no
    bodies, as refused."""
    refusal = ""
    if len(sizes) != len(entry_ids):
        refusal = f"packed adds of ledger {ledger_id}: {len(entry_ids)} entry ids but {len(sizes)} body sizes"
    elif (total := sum(sizes)) != end - start:
        refusal = (
            f"packed adds of ledger {ledger_id}: the {len(sizes)} body sizes add up to {total} bytes"
            f" but the bodies hold {end - start}"
        )
    pieces: list[bytes] = []
    if not refusal and entry_ids:
        ends = list(accumulate(sizes, initial=start))
        pieces = list(map(source.__getitem__, map(slice, ends, islice(ends, 1, None))))
    recovery, deferred_sync = flags & RECOVERY_ADD != 0, write_flags & DEFERRED_SYNC != 0
    return PackedGroup(ledger_id, master_key, recovery, deferred_sync, entry_ids, pieces, refusal)


# PackedAdds' field tags in field-number order (ledger_id ... bodies), as serializers write them.
_GROUP_TAGS = {0x08: 0, 0x12: 1, 0x18: 2, 0x20: 3, 0x2A: 4, 0x32: 5, 0x3A: 6}
_PACKED_TAG = 0x12  # AddEntriesRequest.packed: field 2, length-delimited
COUNT_OK_TAG = 0x18  # AddEntriesRequest.count_ok: field 3, varint
_U64 = (1 << 64) - 1
# The wire's little-endian sfixed64 and fixed32 are this machine's "q" and "I".
_NATIVE_WIRE = sys.byteorder == "little" and array("I").itemsize == 4


class PackedMessage(NamedTuple):
    """A message of packed groups alone, read by :func:`packed_only`."""

    groups: list[PackedGroup]
    count_ok: bool  # AddEntriesRequest.count_ok


def packed_only(data: bytes) -> PackedMessage | None:
    """The groups (and the ``count_ok`` flag) of a message that holds nothing but packed groups,
    each with its fields in field-number order and at most once (what the client, and
    protobuf's serializers, write), read straight from ``data``: each body is sliced out of the
    message itself, without the two copies of all the bodies that protobuf's parse and its
    ``bodies`` field would make. None for any other message (it then goes through protobuf):
    the result is what protobuf's parse gives, which the unit tests check."""
    if not _NATIVE_WIRE:
        return None
    groups: list[PackedGroup] = []
    count_ok = False
    pos, end = 0, len(data)
    try:
        while pos < end:
            tag = data[pos]
            if tag == COUNT_OK_TAG:  # wherever it is, the last one counts, as for protobuf
                value, pos = decode_varint(data, pos + 1)
                count_ok = value & _U64 != 0
                continue
            if tag != _PACKED_TAG:
                return None
            length, pos = decode_varint(data, pos + 1)
            if pos + length > end:
                return None
            group = _group_at(data, pos, pos + length)
            if group is None:
                return None
            groups.append(group)
            pos += length
    except ValueError:  # a truncated or overlong varint
        return None
    return PackedMessage(groups, count_ok)


def _group_at(data: bytes, pos: int, end: int) -> PackedGroup | None:
    """The PackedAdds group in ``data[pos:end]``, if its fields come in field-number order."""
    scalars = [0, 0, 0, 0]  # by field index: ledger_id, -, flags, write_flags
    spans = [(0, 0)] * 7  # by field index: master_key, entry_ids, body_sizes, bodies
    last = -1
    while pos < end:
        tag = data[pos]
        index = _GROUP_TAGS.get(tag, -1)
        if index <= last:
            return None
        last = index
        value, pos = decode_varint(data, pos + 1)
        if tag & 7 == 2:
            if pos + value > end:
                return None
            spans[index] = (pos, pos + value)
            pos += value
        else:
            scalars[index] = value & _U64
    (key_start, key_end), (ids_start, ids_end), (sizes_start, sizes_end), (start, stop) = (
        spans[1], spans[4], spans[5], spans[6]
    )
    if pos != end or (ids_end - ids_start) % 8 or (sizes_end - sizes_start) % 4:
        return None  # not whole ids or sizes: protobuf refuses the message
    ledger_id = scalars[0]
    view = memoryview(data)
    return _unpacked(
        ledger_id - (1 << 64) if ledger_id >> 63 else ledger_id,
        data[key_start:key_end],
        scalars[2] & 0xFFFFFFFF,
        scalars[3] & 0xFFFFFFFF,
        view[ids_start:ids_end].cast("q").tolist(),
        view[sizes_start:sizes_end].cast("I").tolist(),
        data,
        start,
        stop,
    )


def request_ops(adds: Sequence[bookie_pb2.AddRequest]) -> list[AddOp]:
    """An ``AddOp`` per ``AddRequest``: six protobuf field reads each."""
    new = tuple.__new__  # AddOp's own constructor, without its Python-level __new__ frame
    return [
        new(
            AddOp,
            (
                add.ledger_id,
                add.entry_id,
                add.master_key,
                add.body,
                add.flags & RECOVERY_ADD != 0,
                add.write_flags & DEFERRED_SYNC != 0,
            ),
        )
        for add in adds
    ]


class MessageAdds(Sequence[bookie_pb2.AddRequest]):
    """The adds ``start``..``stop`` of a message: its per-add ``adds``, then its packed groups'.
    Slicing (step 1) gives another view; an element is built as an ``AddRequest`` (the slow
    path: the processor reads a slice through :meth:`ops` and :meth:`ids`)."""

    __slots__ = ("_adds", "_ends", "_groups", "_start", "_stop")

    def __init__(
        self,
        adds: Sequence[bookie_pb2.AddRequest],
        groups: Sequence[PackedGroup],
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        self._adds = adds
        self._groups = groups
        # Where each group ends in the message's add positions.
        self._ends = list(accumulate((len(g.entry_ids) for g in groups), initial=len(adds)))[1:]
        total = self._ends[-1] if groups else len(adds)
        self._start = start
        self._stop = total if stop is None else stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> bookie_pb2.AddRequest: ...

    @overload
    def __getitem__(self, index: slice) -> MessageAdds: ...

    def __getitem__(self, index: int | slice) -> bookie_pb2.AddRequest | MessageAdds:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("MessageAdds slices have a step of 1")
            view = MessageAdds.__new__(MessageAdds)
            view._adds, view._groups, view._ends = self._adds, self._groups, self._ends
            view._start = self._start + start
            view._stop = self._start + max(start, stop)
            return view
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("add index out of range")
        position = self._start + index
        if position < len(self._adds):
            return self._adds[position]
        for group, low, end in self._spans():
            if low <= position < end:
                i = position - low
                return bookie_pb2.AddRequest(
                    ledger_id=group.ledger_id,
                    entry_id=group.entry_ids[i],
                    master_key=group.master_key,
                    body=group.bodies[i] if group.bodies else b"",
                    flags=RECOVERY_ADD if group.recovery else 0,
                    write_flags=DEFERRED_SYNC if group.deferred_sync else 0,
                )
        raise IndexError("add index out of range")  # unreachable: the spans cover the message

    def __iter__(self) -> Iterator[bookie_pb2.AddRequest]:
        return map(self.__getitem__, range(len(self)))

    def _spans(self) -> Iterator[tuple[PackedGroup, int, int]]:
        """Each group with its first and end position in the message."""
        return zip(self._groups, chain((len(self._adds),), self._ends), self._ends, strict=False)

    def _parts(self) -> Iterator[tuple[PackedGroup | None, int, int]]:
        """The pieces of this view: (None, low, high) for per-add adds, (group, low, high) for a
        group's adds ``low``..``high`` (positions within the group or the ``adds``)."""
        start, stop = self._start, self._stop
        single = len(self._adds)
        if start < single:
            yield None, start, min(stop, single)
        for group, low, end in self._spans():
            if end <= start:
                continue
            if low >= stop:
                return
            yield group, max(start, low) - low, min(stop, end) - low

    def ops(self) -> tuple[list[AddOp], Refusals]:
        """The ``AddOp`` of every add of this view, in order, but for the adds of refused groups:
        those are returned as refusals instead (view index -> EBADREQ and why)."""
        ops: list[AddOp] = []
        refusals: Refusals = {}
        new = tuple.__new__
        for group, low, high in self._parts():
            if group is None:
                ops += request_ops(self._adds[low:high])
            elif group.refusal:
                base = len(ops) + len(refusals)
                answer = (EBADREQ, group.refusal)
                refusals.update(zip(range(base, base + high - low), repeat(answer)))
            else:
                fields = zip(
                    repeat(group.ledger_id),
                    group.entry_ids[low:high],
                    repeat(group.master_key),
                    group.bodies[low:high],
                    repeat(group.recovery),
                    repeat(group.deferred_sync),
                )
                ops += map(new, repeat(AddOp), fields)
        return ops, refusals

    def ids(self) -> Iterator[tuple[int, int]]:
        """(ledger id, entry id) of every add of this view, in order."""
        pieces: list[Iterator[tuple[int, int]]] = []
        for group, low, high in self._parts():
            if group is None:
                pieces.append((add.ledger_id, add.entry_id) for add in self._adds[low:high])
            else:
                pieces.append(zip(repeat(group.ledger_id), group.entry_ids[low:high]))
        return chain.from_iterable(pieces)


class DecodedAddEntries:
    """A decoded AddEntries message with packed groups: ``adds`` are all its adds, in answer
    order (what a message without groups gives as its protobuf ``adds``), and ``count_ok`` its
    flag (whether the answer gives its leading successes as a count)."""

    __slots__ = ("adds", "count_ok")

    def __init__(self, adds: MessageAdds, count_ok: bool) -> None:
        self.adds = adds
        self.count_ok = count_ok


def decoded(message: bookie_pb2.AddEntriesRequest) -> bookie_pb2.AddEntriesRequest | DecodedAddEntries:
    """``message`` itself if it has no packed groups (its ``adds`` are all its adds), else its
    adds unpacked (the protobuf message is not kept, unless it has per-add adds too)."""
    if not message.packed:
        return message
    groups = [unpack_group(group) for group in message.packed]
    return DecodedAddEntries(MessageAdds(message.adds if message.adds else (), groups), message.count_ok)


def add_ids(adds: Sequence[bookie_pb2.AddRequest]) -> Iterator[tuple[int, int]]:
    """(ledger id, entry id) of each add, in answer order."""
    if isinstance(adds, MessageAdds):
        return adds.ids()
    return ((add.ledger_id, add.entry_id) for add in adds)
