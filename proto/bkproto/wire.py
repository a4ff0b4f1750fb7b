"""Protobuf wire bytes built by hand, for the few messages whose size makes protobuf's own path
costly: a field is a tag, a varint and a value, and a repeated field is its elements one after the
other, so a message of a thousand entry bodies is one ``bytes.join``.

Building a ``ReadEntriesResponse`` with ``bodies=[...]`` copies every body into protobuf's arena,
and ``SerializeToString`` copies them again into a buffer it grows as it goes; here they are
copied once. The bytes equal ``SerializeToString`` of the same message (fields in number order,
proto3 zero values omitted), which the unit tests check.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, islice

from bkproto.v1 import bookie_pb2

EOK = bookie_pb2.EOK
# AddEntriesRequest.count_ok = true (field 3, varint): the add-stream client appends it to every
# message it builds (a field may come anywhere; serializers put it after the adds).
COUNT_OK = b"\x18\x01"
_ONE_BYTE_VARINTS = tuple(bytes((i,)) for i in range(0x80))


def varint(value: int) -> bytes:
    """Protobuf base-128 varint (a negative int64 as its 10-byte two's complement). Ids, lengths
    and sizes of a few KiB take the unrolled paths: encoders call this per entry."""
    if 0 <= value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if 0 <= value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 <= value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if 0 <= value < 0x10000000:  # entry ids past 2 million: a long ledger's
        return bytes(
            ((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, ((value >> 14) & 0x7F) | 0x80, value >> 21)
        )
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _BytesFieldPrefixes(dict[int, bytes]):
    """Tag and length varint of a length-delimited field, by length: entry bodies of one ledger
    mostly share a few lengths, so each prefix is built once. Bounded: past ``_MAX_PREFIXES``
    lengths a prefix is built and not kept."""

    def __init__(self, tag: int) -> None:
        super().__init__()
        self._tag = bytes((tag,))

    def __missing__(self, length: int) -> bytes:
        prefix = self._tag + varint(length)
        if len(self) < _MAX_PREFIXES:
            self[length] = prefix
        return prefix


_MAX_PREFIXES = 4096
_BODY_PREFIXES = _BytesFieldPrefixes(0x22)  # ReadEntriesResponse.bodies: field 4, length-delimited


class EncodedMessage:
    """A response already in wire bytes, handed to gRPC as is (the bookie's serializer calls
    ``SerializeToString``, as it does on a protobuf message). ``status`` is what the handler's
    latency stat and the simulation read of it.

    ``head``: bytes that go before ``data`` (a wrapping message's fields), kept apart so that a
    carrier that writes the two one after the other (the add port) does not copy a megabyte
    answer to prepend a few bytes."""

    __slots__ = ("data", "head", "status")

    def __init__(self, data: bytes, status: int = EOK, head: bytes = b"") -> None:
        self.data = data
        self.status = status
        self.head = head

    def SerializeToString(self) -> bytes:  # protobuf's name: gRPC serializes either
        return self.head + self.data if self.head else self.data


def encode_read_entries_ok(
    ledger_id: int, first_entry_id: int, bodies: Sequence[bytes], max_lac: int
) -> bytes:
    """``ReadEntriesResponse(status=EOK, ledger_id, first_entry_id, bodies, max_lac)`` serialized."""
    head = b""
    if ledger_id:
        head += b"\x10" + varint(ledger_id)
    if first_entry_id:
        head += b"\x18" + varint(first_entry_id)
    tail = b"\x28" + varint(max_lac) if max_lac else b""
    lengths = set(map(len, bodies))
    if len(lengths) == 1:
        # The usual answer: a ledger's entries of one size, so one prefix goes before each body,
        # the head before the first prefix and the tail after the last body (a one-body copy).
        prefix = _BODY_PREFIXES[lengths.pop()]
        return prefix.join(chain((head,), islice(bodies, len(bodies) - 1), (bodies[-1] + tail,)))
    prefixes = map(_BODY_PREFIXES.__getitem__, map(len, bodies))
    return b"".join(chain((head,), chain.from_iterable(zip(prefixes, bodies, strict=True)), (tail,)))


# ReadStreamResponse's fields: request_id (1, varint) and its read_entries (4, length-delimited).
_STREAM_REQUEST_ID = b"\x08"
_STREAM_READ_ENTRIES = b"\x22"


def stream_read_entries(request_id: int, read_entries: EncodedMessage) -> EncodedMessage:
    """``ReadStreamResponse(request_id, read_entries=...)`` around the serialized
    ``ReadEntriesResponse`` ``read_entries``: a message field is its bytes, length first, so the
    answer is a few bytes of head and the same data."""
    data = read_entries.data if not read_entries.head else read_entries.SerializeToString()
    head = _STREAM_REQUEST_ID + varint(request_id) if request_id else b""
    return EncodedMessage(data, read_entries.status, head + _STREAM_READ_ENTRIES + varint(len(data)))
