"""Named logs: an ordered list of closed ledgers under one name, committed atomically.

BookKeeper ledgers are single-writer and have no names, so a job that ingests data in parallel
(say a Spark write, one ledger per task) needs a place where its ledgers become one log, all at
once or not at all. Pulsar's managed ledgers and DistributedLog keep such lists in ZooKeeper too;
ours is deliberately small, outside the ledgers root (BookKeeper iterates every non-reserved child
of ``/ledgers`` as a ledger range):

    /pybk/logs/<name>                     {"version": 1, "next": N, "txns": {appId: lastVersion}}
    /pybk/logs/<name>/segments/<seq>      {"ledger_id", "entries", "length", "write_id", "task"}
    /pybk/logs/<name>/pending/<ledgerId>  write id: a ledger being written, not yet committed

A writer registers each ledger under ``pending/`` before its first entry, so a write that fails
can find and delete every ledger it made, even those of task attempts that died. A commit is one
ZooKeeper transaction: the log znode is rewritten at the version read (so commits serialise),
the segments are created with the next sequence numbers, and their pending znodes go. The
``txns`` map makes a commit idempotent, as Delta Lake's ``txnAppId``/``txnVersion`` do: a version
at or below the last one committed for that app is refused, so a Spark micro-batch replayed after
a failure is not appended twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bkmeta.zk import ZkClient, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import IncorrectParameterError, MetadataStoreError, MetadataVersionError

LOGS_ROOT = "/pybk/logs"
_FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_COMMIT_ATTEMPTS = 20


def check_log_name(name: str) -> str:
    """Names become one znode: letters, digits, ``.``, ``_``, ``-``; 1 to 200 characters."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise IncorrectParameterError(
            f"log name {name!r} is invalid: use 1-200 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class LogSegment:
    """One closed ledger of a log: entries ``0 .. entries - 1``."""

    ledger_id: int
    entries: int
    length: int  # payload bytes (BookKeeper's ledger length counts the same)
    write_id: str
    task: int = 0  # the writing task's partition, for the operator's eye

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> LogSegment:
        try:
            raw = json.loads(data)
            return cls(int(raw["ledger_id"]), int(raw["entries"]), int(raw["length"]),
                       str(raw["write_id"]), int(raw.get("task", 0)))
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataStoreError(f"unreadable log segment at {where}: {e}") from e


@dataclass
class _LogHeader:
    next: int = 0
    txns: dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps({"version": _FORMAT_VERSION, "next": self.next, "txns": self.txns},
                          sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> _LogHeader:
        try:
            raw: dict[str, Any] = json.loads(data)
            if raw.get("version") != _FORMAT_VERSION:
                raise ValueError(f"format version {raw.get('version')!r}, expected {_FORMAT_VERSION}")
            return cls(int(raw["next"]), {str(k): int(v) for k, v in raw["txns"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MetadataStoreError(f"unreadable log at {where}: {e}") from e


@dataclass(frozen=True)
class CommitResult:
    committed: bool  # False: the (app, version) was committed before; nothing was added
    segments: tuple[LogSegment, ...] = ()  # what the log now holds from this commit
    replaced: tuple[LogSegment, ...] = ()  # an overwrite's previous segments (ledgers to delete)


class LogStore:
    """The named logs under ``root`` (``/pybk/logs``)."""

    def __init__(self, zk: ZkClient, root: str = LOGS_ROOT) -> None:
        if not root.startswith("/") or root.endswith("/"):
            raise IncorrectParameterError(f"logs root must be absolute without a trailing slash: {root!r}")
        self._zk = zk
        self.root = root

    def path(self, name: str) -> str:
        return f"{self.root}/{check_log_name(name)}"

    def _segments(self, name: str) -> str:
        return f"{self.path(name)}/segments"

    def _pending(self, name: str) -> str:
        return f"{self.path(name)}/pending"

    async def names(self) -> list[str]:
        try:
            return sorted(await self._zk.get_children(self.root))
        except ZkNoNodeError:
            return []

    async def ensure(self, name: str) -> None:
        """Create the log if it does not exist (idempotent, safe against concurrent creators)."""
        path = self.path(name)
        if await self._zk.exists(f"{path}/pending") is not None:
            return
        await self._zk.ensure_path(self.root)
        for node, value in ((path, _LogHeader().to_bytes()), (f"{path}/segments", b""),
                            (f"{path}/pending", b"")):
            with contextlib.suppress(ZkNodeExistsError):
                await self._zk.create(node, value)

    async def exists(self, name: str) -> bool:
        return await self._zk.exists(self.path(name)) is not None

    # ---- writers ---------------------------------------------------------------------------

    async def register_pending(self, name: str, ledger_id: int, write_id: str) -> None:
        """Note that ``write_id`` is writing ``ledger_id``, before the ledger holds anything."""
        await self._zk.create(f"{self._pending(name)}/{ledger_id}", write_id.encode())

    async def pending(self, name: str) -> dict[int, str]:
        """Ledgers being written and not committed, with the write each belongs to."""
        base = self._pending(name)
        try:
            children = await self._zk.get_children(base)
        except ZkNoNodeError:
            return {}
        values = await asyncio.gather(*(self._get_or_none(f"{base}/{c}") for c in children))
        return {int(c): v.decode() for c, v in zip(children, values, strict=True) if v is not None}

    async def forget_pending(self, name: str, ledger_id: int) -> None:
        with contextlib.suppress(ZkNoNodeError):
            await self._zk.delete(f"{self._pending(name)}/{ledger_id}")

    async def _get_or_none(self, path: str) -> bytes | None:
        try:
            return (await self._zk.get(path))[0]
        except ZkNoNodeError:
            return None

    # ---- the committed log -----------------------------------------------------------------

    async def segments(self, name: str) -> list[LogSegment]:
        """The log's segments in commit order; a log that does not exist is an error."""
        if not await self.exists(name):
            raise IncorrectParameterError(f"log {name!r} does not exist under {self.root}")
        return [seg for _, seg in await self._read_segments(name)]

    async def _read_segments(self, name: str) -> list[tuple[str, LogSegment]]:
        base = self._segments(name)
        try:
            children = sorted(await self._zk.get_children(base))
        except ZkNoNodeError:
            return []
        values = await asyncio.gather(*(self._get_or_none(f"{base}/{c}") for c in children))
        return [(c, LogSegment.from_bytes(v, f"{base}/{c}"))
                for c, v in zip(children, values, strict=True) if v is not None]

    async def last_txn_version(self, name: str, app_id: str) -> int | None:
        data, _ = await self._zk.get(self.path(name))
        return _LogHeader.from_bytes(data, self.path(name)).txns.get(app_id)

    async def commit(
        self,
        name: str,
        write_id: str,
        segments: Sequence[LogSegment],
        *,
        overwrite: bool = False,
        txn: tuple[str, int] | None = None,
    ) -> CommitResult:
        """Append ``segments`` (in the given order) to the log in one transaction, or with
        ``overwrite`` make them the whole log. ``txn`` = (app id, version): refused, with
        ``committed=False``, if that app already committed this version or a later one."""
        path = self.path(name)
        for _ in range(_COMMIT_ATTEMPTS):
            data, stat = await self._zk.get(path)
            header = _LogHeader.from_bytes(data, path)
            if txn is not None:
                app_id, version = txn
                last = header.txns.get(app_id)
                if last is not None and version <= last:
                    return CommitResult(committed=False)
                header.txns[app_id] = version
            replaced = await self._read_segments(name) if overwrite else []
            pending = set(await self._zk.get_children(self._pending(name)))
            ops: list[tuple[str, str, bytes, int]] = []
            ops += [("delete", f"{self._segments(name)}/{node}", b"", -1) for node, _ in replaced]
            for seg in segments:
                ops.append(("create", f"{self._segments(name)}/{header.next:010d}", seg.to_bytes(), -1))
                header.next += 1
                if str(seg.ledger_id) in pending:
                    ops.append(("delete", f"{self._pending(name)}/{seg.ledger_id}", b"", -1))
            ops.insert(0, ("set", path, header.to_bytes(), stat.version))
            try:
                await self._zk.multi(ops)
            except (MetadataVersionError, ZkNodeExistsError, ZkNoNodeError):
                continue  # another commit (or cleanup) came between our read and our write
            return CommitResult(True, tuple(segments), tuple(seg for _, seg in replaced))
        raise MetadataVersionError(
            f"log {name!r}: commit lost to concurrent commits {_COMMIT_ATTEMPTS} times in a row"
        )
