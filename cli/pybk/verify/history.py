"""Payloads that say where they belong, and the history records of every verify process.

A payload names its writer, ledger and sequence number and carries a CRC of its filler, so a
reader can tell a torn, misplaced or foreign entry from the right one without asking anybody.

Each process appends one JSON object per line to its own history file with a single
``os.write`` on an ``O_APPEND`` descriptor: a line is either in the file whole or not at all, so a
``kill -9`` of the process loses only what it had not yet learned (Jepsen's invoke/ok/fail/info:
``info`` is an outcome nobody knows, ``fail`` one that surely did not happen). The parent reads
the files (also while they grow) and never needs the process to cooperate.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAYLOAD_MAGIC = b"pbkv1"

# Event types (Jepsen's): asked, done, surely not done, unknown.
INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"

Event = dict[str, Any]


def payload_hash(data: bytes) -> str:
    """A short, stable digest of an entry's bytes: what the history compares."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def make_payload(writer: str, ledger_id: int, seq: int, rng: random.Random, size: int) -> bytes:
    filler = rng.randbytes(max(0, size))
    head = b"%s w=%s l=%d s=%d crc=%08x|" % (
        PAYLOAD_MAGIC, writer.encode(), ledger_id, seq, zlib.crc32(filler)
    )
    return head + filler


@dataclass(frozen=True)
class PayloadInfo:
    writer: str
    ledger_id: int
    seq: int
    intact: bool  # the filler's CRC matches


def parse_payload(data: bytes) -> PayloadInfo | None:
    """What a payload says about itself, or None if it is not one of ours at all."""
    head, sep, filler = data.partition(b"|")
    parts = head.split(b" ")
    if not sep or len(parts) != 5 or parts[0] != PAYLOAD_MAGIC:
        return None
    try:
        fields = dict(part.split(b"=", 1) for part in parts[1:])
        return PayloadInfo(
            writer=fields[b"w"].decode(),
            ledger_id=int(fields[b"l"]),
            seq=int(fields[b"s"]),
            intact=int(fields[b"crc"], 16) == zlib.crc32(filler),
        )
    except (KeyError, ValueError):
        return None


class HistoryWriter:
    """Appends events to one process's history file, one whole line per ``os.write``."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, kind: str, op: str, **fields: Any) -> None:
        record = {"t": round(time.time(), 4), "f": kind, "op": op, **fields}
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class HistoryTail:
    """Reads one history file incrementally; a last line without its newline waits for more."""

    def __init__(self, path: Path, process: str) -> None:
        self.path = path
        self.process = process
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[Event]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events: list[Event] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # cannot happen with whole-line writes; never worth dying for
            event["p"] = self.process
            events.append(event)
        return events


def read_all(paths: dict[str, Path]) -> Iterator[Event]:
    """Every complete event of the given ``process -> file`` map, each tagged with its process."""
    for process, path in paths.items():
        yield from HistoryTail(path, process).read_new()


def payload_problem(data: bytes, ledger_id: int, entry_id: int) -> str | None:
    """Why the bytes read at (ledger, entry) cannot be what a verify writer put there, if so.
    A writer's n-th append to a ledger is entry n, so the payload names its own position."""
    info = parse_payload(data)
    if info is None:
        return "not a verify payload"
    if not info.intact:
        return "filler CRC mismatch"
    if (info.ledger_id, info.seq) != (ledger_id, entry_id):
        return f"payload says ledger {info.ledger_id} entry {info.seq}"
    return None


def read_fields(data: bytes, ledger_id: int, entry_id: int) -> dict[str, Any]:
    """The fields of a ``read`` event for these bytes."""
    fields: dict[str, Any] = {"l": ledger_id, "e": entry_id, "h": payload_hash(data)}
    problem = payload_problem(data, ledger_id, entry_id)
    if problem is not None:
        fields["bad"] = problem
    return fields
