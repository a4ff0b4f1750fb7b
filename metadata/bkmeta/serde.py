"""Ledger metadata <-> znode bytes, byte-compatible with BookKeeper's ``LedgerMetadataSerDe``.

Format v3 (what we write)::

    b"BookieMetadataFormatVersion\\t3\\n" + varint(len(msg)) + LedgerMetadataFormat   # writeDelimitedTo

As in Java, ``lastEntryId`` is always written (-1 while the ledger is open), the write quorum goes
in field 1 (``quorumSize``) and custom metadata is a repeated key/value message.

Older formats are read, never written (a ledger's metadata changed by pybookkeeper is stored as
v3, which BookKeeper reads since 4.9):

- v2 (BookKeeper 4.2-4.8): the same header with ``2``, then the protobuf TextFormat of
  ``LedgerMetadataFormat``.
- v1 (BookKeeper 4.0-4.1): the header with ``1``, then lines: write quorum, ensemble size, length,
  one ``firstEntryId<TAB>bookie<TAB>bookie...`` line per segment, and for a closed ledger a last
  line ``lastEntryId<TAB>CLOSED`` (``-102<TAB>CLOSED`` meant IN_RECOVERY). Qa is Qw, there is no
  password, and the digest is CRC32.
"""

from __future__ import annotations

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment
from bkproto.errors import MetadataStoreError
from bkproto.v1 import metadata_pb2

VERSION_KEY = b"BookieMetadataFormatVersion\t"
CURRENT_VERSION = 3
_V1_CLOSED_TAG = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID = -102

_Format = metadata_pb2.LedgerMetadataFormat


class CorruptLedgerMetadataError(MetadataStoreError):
    """A ledger metadata znode could not be decoded."""

    retriable = False


def encode_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """(value, position after it); raises ``ValueError`` on truncation or > 64 bits."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint longer than 64 bits")


def to_proto(md: LedgerMetadata) -> metadata_pb2.LedgerMetadataFormat:
    msg = _Format(
        quorumSize=md.write_quorum_size,
        ensembleSize=md.ensemble_size,
        length=md.length,
        state=md.state.name,
        digestType=md.digest_type.name,
        password=md.password,
        ackQuorumSize=md.ack_quorum_size,
        ctime=md.ctime,
        cToken=md.c_token,
    )
    msg.lastEntryId = md.last_entry_id  # Java always writes it; an open ledger's is -1
    for seg in md.segments:
        msg.segment.add(ensembleMember=list(seg.bookies), firstEntryId=seg.first_entry_id)
    for key in sorted(md.custom_metadata):
        msg.customMetadata.add(key=key, value=bytes(md.custom_metadata[key]))
    return msg


_STATES = {state.value: state for state in LedgerState}
_DIGESTS = {digest.value: digest for digest in DigestType}


def from_proto(msg: metadata_pb2.LedgerMetadataFormat) -> LedgerMetadata:
    # Enum members by dict lookup (an unknown value is a KeyError: corrupt metadata) and the
    # model's decoder constructor: a cold read decodes one of these per ledger opened.
    has = msg.HasField
    return LedgerMetadata.decoded(
        ensemble_size=msg.ensembleSize,
        write_quorum_size=msg.quorumSize,
        # Metadata written before ackQuorumSize existed means Qa == Qw (Java does the same).
        ack_quorum_size=msg.ackQuorumSize if has("ackQuorumSize") else msg.quorumSize,
        state=_STATES[msg.state],
        last_entry_id=msg.lastEntryId if has("lastEntryId") else -1,
        length=msg.length,
        digest_type=_DIGESTS[msg.digestType] if has("digestType") else DigestType.CRC32,
        password=msg.password,
        ctime=msg.ctime,
        custom_metadata={e.key: e.value for e in msg.customMetadata},
        segments=tuple(Segment(s.firstEntryId, tuple(s.ensembleMember)) for s in msg.segment),
        c_token=msg.cToken,
    )


def serialize(md: LedgerMetadata) -> bytes:
    body = to_proto(md).SerializeToString(deterministic=True)
    return VERSION_KEY + str(CURRENT_VERSION).encode() + b"\n" + encode_varint(len(body)) + body


_V3_HEADER = VERSION_KEY + b"3\n"


def deserialize(data: bytes, ledger_id: int | None = None, path: str | None = None) -> LedgerMetadata:
    """Decode a v3 (binary) or v2 (text) metadata znode; errors name the ledger and path."""
    try:
        msg = _Format()
        if data.startswith(_V3_HEADER):  # what every writer since BookKeeper 4.9 stores
            _parse_delimited(data, len(_V3_HEADER), msg)
            return from_proto(msg)
        if not data.startswith(VERSION_KEY):
            raise ValueError("missing BookieMetadataFormatVersion header")
        newline = data.index(b"\n", len(VERSION_KEY))
        version = int(data[len(VERSION_KEY) : newline])
        rest = data[newline + 1 :]
        if version == 3:  # a header spelt differently, e.g. "03"
            _parse_delimited(rest, 0, msg)
        elif version == 2:
            text_format.Parse(rest.decode("utf-8"), msg)
        elif version == 1:
            msg = _parse_v1(rest.decode("utf-8"))
        else:
            raise ValueError(f"unsupported metadata format version {version}")
        return from_proto(msg)
    except (ValueError, DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
        raise CorruptLedgerMetadataError(f"corrupt metadata for {_where(ledger_id, path)}: {e}") from e
    except MetadataStoreError:
        raise
    except Exception as e:  # validation errors from the model, unknown enum values, ...
        raise CorruptLedgerMetadataError(
            f"corrupt metadata for {_where(ledger_id, path)}: {type(e).__name__}: {e}"
        ) from e


def _parse_delimited(data: bytes, pos: int, msg: metadata_pb2.LedgerMetadataFormat) -> None:
    """Parse the varint-length-prefixed message at ``pos`` (Java's ``writeDelimitedTo``) into ``msg``."""
    size, pos = decode_varint(data, pos)
    if pos + size > len(data):
        raise ValueError(f"message length {size} exceeds the {len(data) - pos} bytes present")
    msg.ParseFromString(data[pos : pos + size])


def _where(ledger_id: int | None, path: str | None) -> str:
    return f"ledger {ledger_id if ledger_id is not None else '?'} at {path or '?'}"


def _parse_v1(text: str) -> metadata_pb2.LedgerMetadataFormat:
    """BookKeeper 4.0-4.1's line format, as Java's ``parseVersion1Config`` reads it."""
    lines = text.split("\n")
    if len(lines) < 3:
        raise ValueError(f"v1 metadata has {len(lines)} lines, expected at least 3")
    write_quorum, ensemble_size, length = int(lines[0]), int(lines[1]), int(lines[2])
    msg = _Format(
        quorumSize=write_quorum,
        ensembleSize=ensemble_size,
        length=0,
        state="OPEN",
        digestType="CRC32",
        ackQuorumSize=write_quorum,
    )
    for line in lines[3:]:
        parts = line.split("\t")
        if len(parts) < 2:
            raise ValueError(f"v1 metadata line {line!r} has no tab-separated fields")
        if parts[1] == _V1_CLOSED_TAG:
            last = int(parts[0])
            if last == _V1_IN_RECOVERY_ENTRY_ID:
                msg.state = _Format.IN_RECOVERY
            else:
                msg.state = _Format.CLOSED
                msg.lastEntryId = last
                msg.length = length
            break
        msg.segment.add(firstEntryId=int(parts[0]), ensembleMember=parts[1:])
    return msg
