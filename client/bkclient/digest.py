"""Entry and LAC digests, byte-compatible with BookKeeper's ``DigestManager`` (v3 layout).

An entry body is ``header(32) || digest(N) || payload``; the digest covers the header, then the
payload. The header is ledgerId, entryId, lastAddConfirmed and the cumulative ledger length, all
big-endian longs (``bkproto.entry_format``). An explicit-LAC body is ``ledgerId || lac || digest``.

Digest sizes follow BookKeeper: CRC32 is written as an 8-byte long, CRC32C as a 4-byte int,
HMAC-SHA1 (key ``SHA1("mac" || password)``) is 20 bytes, DUMMY is empty.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import add, itemgetter, ne
from typing import NamedTuple

import crc32c

from bkproto.entry_format import HEADER, HEADER_SIZE, LAC_HEADER
from bkproto.errors import DigestMismatchError, IncorrectParameterError

# Values of bkmeta.model.DigestType (BookKeeper's DataFormats.proto numbering). Kept as plain ints
# here so the digest code has no dependency beyond bkproto; DigestType is an IntEnum and compares equal.
CRC32 = 1
HMAC = 2
CRC32C = 3
DUMMY = 4

_LONG = struct.Struct(">Q")
_INT = struct.Struct(">I")
_LAC_SIZE = LAC_HEADER.size  # 16
# An entry body's header followed by its CRC digest (ledgerId, entryId, lac, length, digest)
_CRC32C_HEADER = struct.Struct(">qqqqI")
_CRC32_HEADER = struct.Struct(">qqqqQ")
_HEADER_PART = itemgetter(slice(0, HEADER_SIZE))
_IDS_AND_DIGEST = itemgetter(0, 1, 4)  # of a header unpacked with its digest: ledger, entry, digest


def _after(start: int) -> Callable[[bytes], bytes]:
    return itemgetter(slice(start, None))


def master_key(password: bytes) -> bytes:
    """BookKeeper's ledger key, sent with every add, fence read and WriteLac: SHA1("ledger" || pw)."""
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA1 key of the MAC digest: SHA1("mac" || password)."""
    return hashlib.sha1(b"mac" + password).digest()


class VerifiedEntry(NamedTuple):
    payload: bytes
    last_add_confirmed: int
    length: int


class VerifiedHeader(NamedTuple):
    """A verified entry whose id was not known in advance (e.g. a bookie's last entry)."""

    entry_id: int
    payload: bytes
    last_add_confirmed: int
    length: int


# A digest function takes the two parts the digest covers and returns the digest bytes.
_DigestFn = Callable[[bytes | memoryview, bytes | memoryview], bytes]


def _crc32(first: bytes | memoryview, second: bytes | memoryview) -> bytes:
    return _LONG.pack(zlib.crc32(second, zlib.crc32(first)))


def _crc32c(first: bytes | memoryview, second: bytes | memoryview) -> bytes:
    return _INT.pack(crc32c.crc32c(second, crc32c.crc32c(first)))


def _dummy(first: bytes | memoryview, second: bytes | memoryview) -> bytes:
    return b""


def _hmac_fn(key: bytes) -> _DigestFn:
    base = hmac.new(key, digestmod=hashlib.sha1)

    def digest(first: bytes | memoryview, second: bytes | memoryview) -> bytes:
        mac = base.copy()  # copying the keyed state skips re-deriving the pads per entry
        mac.update(first)
        mac.update(second)
        return mac.digest()

    return digest


class DigestManager:
    """Builds and checks entry bodies for one ledger (digest type, password, ledger id)."""

    def __init__(self, ledger_id: int, password: bytes, digest_type: int) -> None:
        self.ledger_id = ledger_id
        self.digest_type = int(digest_type)
        self.master_key = master_key(password)
        fn: _DigestFn
        if self.digest_type == CRC32:
            fn, size = _crc32, 8
        elif self.digest_type == CRC32C:
            fn, size = _crc32c, 4
        elif self.digest_type == HMAC:
            fn, size = _hmac_fn(mac_key(password)), 20
        elif self.digest_type == DUMMY:
            fn, size = _dummy, 0
        else:
            raise IncorrectParameterError(f"unknown digest type {digest_type!r}")
        self._digest = fn
        self.digest_size = size

    @property
    def digest_function(self) -> Callable[[bytes, bytes], bytes]:
        """The digest of two parts (an entry's header, then its payload): for encoders that frame
        an entry themselves (``add_stream.LedgerAddRequestEncoder``)."""
        return self._digest

    # -- entries -------------------------------------------------------------------------------

    def encode_entry(self, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """The wire body of an entry: header || digest || payload. ``length`` is the cumulative
        ledger length including this entry; ``lac`` the writer's LAC when it sends the entry."""
        header, digest = self.entry_parts(entry_id, lac, length, payload)
        return header + digest + payload

    def encode_entries(
        self, entry_ids: Sequence[int], lac: int, lengths: Iterable[int], payloads: Iterable[bytes]
    ) -> list[bytes]:
        """:meth:`encode_entry` of each entry of a batch (``lengths``, ``payloads``: one per id,
        in order), all carrying ``lac``. For the CRC digests every step is a C-level pass over
        the batch (header, digest, body), not a chain of Python calls per entry: the add path
        encodes every entry it sends."""
        ledger_ids = repeat(self.ledger_id, len(entry_ids))
        headers = list(map(HEADER.pack, ledger_ids, entry_ids, repeat(lac), lengths))
        payloads = list(payloads)
        digests: Iterable[bytes]
        if self.digest_type == CRC32C:
            digests = map(_INT.pack, map(crc32c.crc32c, payloads, map(crc32c.crc32c, headers)))
        elif self.digest_type == CRC32:
            digests = map(_LONG.pack, map(zlib.crc32, payloads, map(zlib.crc32, headers)))
        else:
            digests = map(self._digest, headers, payloads)
        return list(map(add, map(add, headers, digests), payloads))

    def entry_parts(self, entry_id: int, lac: int, length: int, payload: bytes) -> tuple[bytes, bytes]:
        """The header and digest that precede ``payload`` in :meth:`encode_entry`'s body, for a
        caller that frames the three parts itself (the add path: one copy of the payload)."""
        header = HEADER.pack(self.ledger_id, entry_id, lac, length)
        return header, self._digest(header, payload)

    def verify_entry(self, entry_id: int, body: bytes) -> VerifiedEntry:
        """Check ``body``'s digest and that it is entry ``entry_id`` of this ledger.

        Raises :class:`DigestMismatchError` on any mismatch (corrupt data, wrong password or
        digest type, or an entry of another ledger or id)."""
        header = self.verify_header(body)
        if header.entry_id != entry_id:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: asked for entry {entry_id}, body holds entry {header.entry_id}"
            )
        return VerifiedEntry(header.payload, header.last_add_confirmed, header.length)

    def verify_header(self, body: bytes) -> VerifiedHeader:
        """Check the digest and the ledger id of an entry whose id is not known in advance
        (BookKeeper's ``verifyDigestAndReturnLastConfirmed``, used for reads of entry -1)."""
        start = HEADER_SIZE + self.digest_size
        if len(body) < start:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: entry body of {len(body)} bytes is shorter than "
                f"header and digest ({start} bytes)"
            )
        view = memoryview(body)
        expected = self._digest(view[:HEADER_SIZE], view[start:])
        if not hmac.compare_digest(expected, view[HEADER_SIZE:start]):
            entry = HEADER.unpack_from(body)[1]
            raise DigestMismatchError(f"ledger {self.ledger_id}: digest mismatch for entry {entry}")
        ledger_id, entry_id, lac, length = HEADER.unpack_from(body)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                f"entry body belongs to ledger {ledger_id}, expected ledger {self.ledger_id}"
            )
        return VerifiedHeader(entry_id, body[start:], lac, length)

    def verify_entries(
        self, first_id: int, stride: int, bodies: Sequence[bytes]
    ) -> tuple[list[bytes], DigestMismatchError | None]:
        """The payloads of ``bodies``, entries ``first_id``, ``first_id + stride``, ..., each
        checked as :meth:`verify_entry` checks it, up to the first that fails; and that failure
        (None if every body verified). A range read checks a thousand bodies at a time: for the
        CRC digests in a few C-level passes (the header unpacks, the payload slices, two CRC
        calls per body, one list comparison) rather than a Python step per body; the other
        digests check each body on its own."""
        if self.digest_type == CRC32C:
            checked: struct.Struct = _CRC32C_HEADER
            crc: Callable[..., int] = crc32c.crc32c
        elif self.digest_type == CRC32:
            checked, crc = _CRC32_HEADER, zlib.crc32
        else:
            return self._verify_each(first_id, stride, bodies)
        start = checked.size
        count = len(bodies)
        if not count or min(map(len, bodies)) < start:
            return self._verify_each(first_id, stride, bodies)
        payloads = list(map(_after(start), bodies))
        # BookKeeper's CRC digest runs over the 32-byte header, then over the payload
        headers_crc = map(crc, map(_HEADER_PART, bodies))
        found = list(map(_IDS_AND_DIGEST, map(checked.unpack_from, bodies)))
        wanted = list(
            zip(
                repeat(self.ledger_id, count),
                range(first_id, first_id + count * stride, stride),
                map(crc, payloads, headers_crc),
                strict=True,
            )
        )
        if found == wanted:
            return payloads, None
        bad = list(map(ne, found, wanted)).index(True)
        return payloads[:bad], self._mismatch(first_id + bad * stride, bodies[bad])

    def _verify_each(
        self, first_id: int, stride: int, bodies: Sequence[bytes]
    ) -> tuple[list[bytes], DigestMismatchError | None]:
        payloads: list[bytes] = []
        entry_id = first_id
        for body in bodies:
            try:
                payloads.append(self.verify_entry(entry_id, body).payload)
            except DigestMismatchError as exc:
                return payloads, exc
            entry_id += stride
        return payloads, None

    def _mismatch(self, entry_id: int, body: bytes) -> DigestMismatchError:
        """:meth:`verify_entry`'s error for a body the batch check refused."""
        try:
            self.verify_entry(entry_id, body)
        except DigestMismatchError as exc:
            return exc
        # the batch check and verify_entry disagree: a bug here, reported as a mismatch
        return DigestMismatchError(f"ledger {self.ledger_id}: entry {entry_id} failed its batch check")

    # -- explicit LAC --------------------------------------------------------------------------

    def encode_lac(self, lac: int) -> bytes:
        """The WriteLac body: ledgerId || lac || digest."""
        header = LAC_HEADER.pack(self.ledger_id, lac)
        return header + self._digest(header, b"")

    def verify_lac(self, body: bytes) -> int:
        """The LAC in a ReadLac body, after checking its digest and ledger id."""
        end = _LAC_SIZE + self.digest_size
        if len(body) != end:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: LAC body is {len(body)} bytes, expected {end}"
            )
        view = memoryview(body)
        if not hmac.compare_digest(self._digest(view[:_LAC_SIZE], b""), view[_LAC_SIZE:end]):
            raise DigestMismatchError(f"ledger {self.ledger_id}: LAC digest mismatch")
        ledger_id, lac = LAC_HEADER.unpack_from(body)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(f"LAC body belongs to ledger {ledger_id}, expected {self.ledger_id}")
        return int(lac)
