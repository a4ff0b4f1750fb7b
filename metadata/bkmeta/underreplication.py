"""The cluster's index of under-replicated ledgers, where BookKeeper keeps it
(``ZkLedgerUnderreplicationManager``), so that its tools and ours read the same znodes:

- ``<root>/underreplication/ledgers/<4 x %04x>/urL%010d``: one marker per ledger that is short of
  a replica, split by the ledger id's four 16-bit groups so no directory grows too big. Its data
  is BookKeeper's ``UnderreplicatedLedgerFormat`` in protobuf text form: one ``replica: "<id>"``
  line per bookie found short (the auditor's finding) and ``ctime: <ms since the epoch>`` of
  the first mark;
- ``<root>/underreplication/locks/urL%010d``: EPHEMERAL, held by the replication worker repairing
  that ledger. A worker that dies leaves it to expire with its session; another then takes over.

Marking merges: a ledger marked again keeps its ctime and gains the new replicas. A worker
deletes the marker only at the version it read before repairing (:meth:`mark_replicated`), so a
replica the auditor added meanwhile is not lost: the next round repairs it.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass

from bkmeta.layout import ZkLayout
from bkmeta.model import Versioned
from bkmeta.store import MetadataStore, ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError
from bkmeta.update_loop import VersionedUpdateLoop
from bkproto.errors import MetadataStoreError

LEDGERS_ZNODE = "ledgers"
LOCKS_ZNODE = "locks"
MARKER_PREFIX = "urL"
CHECK_ALL_LEDGERS_CTIME_ZNODE = "checkallledgersctime"

_MarkerValue = tuple[frozenset[str], int]  # (replicas, ctime in ms)
_REPLICA = re.compile(r'^\s*replica\s*:\s*"([^"]*)"\s*$')
_CTIME = re.compile(r"^\s*ctime\s*:\s*(-?\d+)\s*$")


class CorruptUnderreplicationMarkerError(MetadataStoreError):
    """A marker znode whose data is not ``UnderreplicatedLedgerFormat`` text."""

    retriable = False


@dataclass(frozen=True)
class Marker:
    """One under-replicated ledger as its znode says (``version``: for :meth:`mark_replicated`)."""

    ledger_id: int
    replicas: frozenset[str]  # the bookies found short of entries they should hold
    ctime_ms: int
    version: int


def marker_relative_path(ledger_id: int) -> str:
    """``0000/0000/0000/0001/urL0000000001`` (BookKeeper's ``getUrLedgerZnode``)."""
    groups = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{groups}/{MARKER_PREFIX}{ledger_id:010d}"


def encode_marker(replicas: frozenset[str], ctime_ms: int) -> bytes:
    lines = [f'replica: "{r}"' for r in sorted(replicas)] + [f"ctime: {ctime_ms}"]
    return ("\n".join(lines) + "\n").encode()


def decode_marker(path: str, data: bytes) -> tuple[frozenset[str], int]:
    replicas: set[str] = set()
    ctime = 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptUnderreplicationMarkerError(f"{path}: not text") from exc
    for line in text.splitlines():
        if not line.strip():
            continue
        if (m := _REPLICA.match(line)) is not None:
            replicas.add(m[1])
        elif (m := _CTIME.match(line)) is not None:
            ctime = int(m[1])
        else:
            raise CorruptUnderreplicationMarkerError(f"{path}: unexpected line {line[:60]!r}")
    return frozenset(replicas), ctime


class UnderreplicationIndex:
    """Mark, list, lock and clear under-replicated ledgers (any number of processes at once)."""

    def __init__(self, zk: MetadataStore, layout: ZkLayout, identity: str = "") -> None:
        self._zk = zk
        self.base = layout.underreplication
        self.ledgers_path = f"{self.base}/{LEDGERS_ZNODE}"
        self.locks_path = f"{self.base}/{LOCKS_ZNODE}"
        self._identity = identity.encode()

    def marker_path(self, ledger_id: int) -> str:
        return f"{self.ledgers_path}/{marker_relative_path(ledger_id)}"

    def lock_path(self, ledger_id: int) -> str:
        return f"{self.locks_path}/{MARKER_PREFIX}{ledger_id:010d}"

    # -- the auditor's side ---------------------------------------------------------------------

    async def mark(self, ledger_id: int, replicas: frozenset[str]) -> bool:
        """Record that ``replicas`` of ``ledger_id`` lack entries; True if the marker is new or
        gained a replica."""
        path = self.marker_path(ledger_id)

        async def read() -> Versioned[_MarkerValue]:
            data, stat = await self._zk.get(path)
            return Versioned(decode_marker(path, data), stat.version)

        async def write(marker: _MarkerValue, version: int) -> Versioned[_MarkerValue]:
            stat = await self._zk.set(path, encode_marker(*marker), version=version)
            return Versioned(marker, stat.version)

        while True:
            try:
                await self._zk.create(path, encode_marker(replicas, int(time.time() * 1000)), makepath=True)
                return True
            except ZkNodeExistsError:
                pass
            # already marked: add the replicas it lacks, keeping its ctime (the project's CAS loop)
            grew = False

            def needs(marker: _MarkerValue) -> bool:
                nonlocal grew
                grew = not replicas <= marker[0]
                return grew

            loop = VersionedUpdateLoop(path, read, write, needs, lambda m: (m[0] | replicas, m[1]))
            try:
                await loop.run()
            except ZkNoNodeError:
                continue  # cleared meanwhile: create it again
            return grew

    async def get(self, ledger_id: int) -> Marker | None:
        path = self.marker_path(ledger_id)
        try:
            data, stat = await self._zk.get(path)
        except ZkNoNodeError:
            return None
        replicas, ctime = decode_marker(path, data)
        return Marker(ledger_id, replicas, ctime, stat.version)

    async def ledger_ids(self) -> list[int]:
        """Every marked ledger, ascending (walks the four levels of the tree)."""
        found: list[int] = []

        async def walk(path: str, depth: int) -> None:
            try:
                children = await self._zk.get_children(path)
            except ZkNoNodeError:
                return
            for child in children:
                if depth == 4:
                    if child.startswith(MARKER_PREFIX) and child[len(MARKER_PREFIX):].isdigit():
                        found.append(int(child[len(MARKER_PREFIX):]))
                else:
                    await walk(f"{path}/{child}", depth + 1)

        await walk(self.ledgers_path, 0)
        return sorted(found)

    async def markers(self) -> list[Marker]:
        out = []
        for ledger_id in await self.ledger_ids():
            with contextlib.suppress(CorruptUnderreplicationMarkerError):
                marker = await self.get(ledger_id)
                if marker is not None:
                    out.append(marker)
        return out

    # -- the replication worker's side ----------------------------------------------------------

    async def try_lock(self, ledger_id: int) -> bool:
        """Take the ledger's lock (an ephemeral of this session); False if another holds it."""
        try:
            await self._zk.create(self.lock_path(ledger_id), self._identity, ephemeral=True, makepath=True)
        except ZkNodeExistsError:
            return False
        return True

    async def lock_holder(self, ledger_id: int) -> str | None:
        try:
            data, _ = await self._zk.get(self.lock_path(ledger_id))
        except ZkNoNodeError:
            return None
        return data.decode(errors="replace")

    async def release(self, ledger_id: int) -> None:
        """Give the lock back (only if this session holds it)."""
        await self._zk.delete_own_ephemeral(self.lock_path(ledger_id))

    async def mark_replicated(self, marker: Marker) -> bool:
        """Delete the marker if it is still as read (``marker.version``); False when the auditor
        changed it meanwhile (it stays for the next round) or it is already gone."""
        path = self.marker_path(marker.ledger_id)
        try:
            await self._zk.delete(path, version=marker.version)
        except (ZkBadVersionError, ZkNoNodeError):
            return False
        await self._prune(path)
        return True

    async def _prune(self, path: str) -> None:
        """Remove the marker's now empty parent directories (a non-empty or re-used one stays)."""
        parent = path.rsplit("/", 1)[0]
        while parent != self.ledgers_path and parent.startswith(self.ledgers_path):
            try:
                if await self._zk.get_children(parent):
                    return
                await self._zk.delete(parent)
            except MetadataStoreError:
                return  # someone marked a ledger under it meanwhile, or it is already gone
            parent = parent.rsplit("/", 1)[0]

    # -- the periodic check's timestamp ---------------------------------------------------------

    async def check_all_ledgers_ctime(self) -> int | None:
        """When the last full ledger check ended (ms since the epoch), or None if never."""
        try:
            data, _ = await self._zk.get(f"{self.base}/{CHECK_ALL_LEDGERS_CTIME_ZNODE}")
        except ZkNoNodeError:
            return None
        text = data.decode(errors="replace").strip()
        return int(text) if text.isdigit() else None

    async def set_check_all_ledgers_ctime(self, ms: int) -> None:
        path = f"{self.base}/{CHECK_ALL_LEDGERS_CTIME_ZNODE}"
        try:
            await self._zk.set(path, str(ms).encode())
        except ZkNoNodeError:
            with contextlib.suppress(ZkNodeExistsError):
                await self._zk.create(path, str(ms).encode(), makepath=True)
