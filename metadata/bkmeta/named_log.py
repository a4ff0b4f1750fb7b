"""Named logs: an ordered list of closed ledgers under one name, committed a write at a time.

BookKeeper ledgers are single-writer and have no names, so a job that ingests data in parallel
(say a Spark write, one ledger per task) needs a place where its ledgers become one log, all at
once or not at all. Pulsar's managed ledgers and DistributedLog keep such lists in ZooKeeper too;
ours is deliberately small, outside the ledgers root (BookKeeper iterates every non-reserved child
of ``/ledgers`` as a ledger range):

    /pybk/logs/<name>                         {"version": 1, "next": N, "txns": {appId: lastVersion}}
    /pybk/logs/<name>/commits/<seq>-<write>   {"write_id": ..., "segments": [{ledger_id, entries,
                                                length, task}, ...]}: one write's ledgers, in order
    /pybk/logs/<name>/pending/<ledgerId>      write id: a ledger being written, not committed yet
    /pybk/logs/<name>/aborted/<write>         empty: this write was aborted (no data; its ctime
                                                is its age, for ``pybk shell loggc``)

A commit is one ZooKeeper transaction: the log znode rewritten at the version read (so commits
serialise and take the next sequence number), one commit znode, and the deletion of the
ledgers' pending znodes. So a ledger is pending until the moment it is committed, and an abort
(which deletes what is pending) can never delete a committed ledger; and the same commit applied
twice fails on the pending znodes. The commit znode's name carries the write id, so a commit
whose reply was lost to a connection drop is recognised as done. The ``txns`` map
makes a commit idempotent, as Delta Lake's ``txnAppId``/``txnVersion`` do: a version at or below
the last one committed for that app is refused, so a Spark micro-batch replayed after a failure
is not appended twice.

An abort creates the write's ``aborted/`` marker before it sweeps the write's pending ledgers,
and a writer looks for that marker after it registers its ledger: one of the two always sees
the other (ZooKeeper applies writes in one order, and a read after one's own write sees every
write ordered before it), so a task that registers after the sweep removes its own ledger
instead of leaving an orphan. A commit creates and deletes the marker in its transaction, which
fails if the marker exists (ZooKeeper has no "check absent" op): an aborted write never commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bkmeta.store import MetadataStore, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import IllegalOpError, IncorrectParameterError, MetadataStoreError, MetadataVersionError

LOGS_ROOT = "/pybk/logs"
# Custom metadata on every segment ledger: an orphan (its writer and coordinator both gone) can
# be traced to its log and write, and found by the log's garbage collection. The log is named by
# its whole path (root included): two roots may hold logs of the same name.
LOG_NAME_KEY = "pybk.log"
WRITE_ID_KEY = "pybk.write"
_FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_WRITE_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
_COMMIT_ATTEMPTS = 30
_READ_ATTEMPTS = 10
# ZooKeeper refuses a request above jute.maxbuffer (1 MiB by default) by dropping the connection,
# which looks like an outage: refuse a commit record well below that, with its size.
MAX_COMMIT_BYTES = 900 * 1024


def check_log_name(name: str) -> str:
    """Names become one znode: letters, digits, ``.``, ``_``, ``-``; 1 to 200 characters."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise IncorrectParameterError(
            f"log name {name!r} is invalid: use 1-200 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_write_id(write_id: str) -> str:
    """Write ids end commit znode names, after the sequence number and a dash, and name an
    aborted write's marker znode (so not ``.`` or ``..``, which ZooKeeper refuses as names)."""
    if not isinstance(write_id, str) or not _WRITE_ID.fullmatch(write_id) or write_id in (".", ".."):
        raise IncorrectParameterError(
            f"write id {write_id!r} is invalid: use 1-100 letters, digits, '.', '_' or '-' "
            "(not '.' or '..' alone)"
        )
    return write_id


@dataclass(frozen=True)
class LogSegment:
    """One closed ledger of a log: entries ``0 .. entries - 1``."""

    ledger_id: int
    entries: int
    length: int  # payload bytes (BookKeeper's ledger length counts the same)
    write_id: str
    task: int = 0  # the writing task's partition, for the operator's eye


def _seq_of(node: str) -> int:
    """The commit number in a commit znode's name, ``<seq>-<write id>``."""
    return int(node.partition("-")[0])


@dataclass(frozen=True)
class LogCommit:
    """One write's segments, as committed."""

    node: str  # <seq>-<write id>
    write_id: str
    segments: tuple[LogSegment, ...]
    created_ms: int = field(default=0, compare=False)  # the commit znode's ctime (0: not read)

    @property
    def seq(self) -> int:
        """The commit's number in its log: commits are numbered in the order they were made."""
        return _seq_of(self.node)

    def to_bytes(self) -> bytes:
        rows = [{k: v for k, v in asdict(s).items() if k != "write_id"} for s in self.segments]
        return json.dumps({"write_id": self.write_id, "segments": rows}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, node: str, data: bytes, where: str, created_ms: int = 0) -> LogCommit:
        try:
            raw = json.loads(data)
            write_id = str(raw["write_id"])
            segments = tuple(
                LogSegment(int(s["ledger_id"]), int(s["entries"]), int(s["length"]), write_id, int(s["task"]))
                for s in raw["segments"]
            )
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataStoreError(f"unreadable log commit at {where}: {e}") from e
        return cls(node, write_id, segments, created_ms)


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
    last_version: int | None = None  # when refused: the app's last committed version


@dataclass(frozen=True)
class PendingLedger:
    write_id: str
    created_ms: int  # when it was registered (the znode's ctime)


class LogStore:
    """The named logs under ``root`` (``/pybk/logs``)."""

    def __init__(self, zk: MetadataStore, root: str = LOGS_ROOT) -> None:
        if not root.startswith("/") or root.endswith("/"):
            raise IncorrectParameterError(f"logs root must be absolute without a trailing slash: {root!r}")
        self._zk = zk
        self.root = root

    def path(self, name: str) -> str:
        return f"{self.root}/{check_log_name(name)}"

    def _commits(self, name: str) -> str:
        return f"{self.path(name)}/commits"

    def _pending(self, name: str) -> str:
        return f"{self.path(name)}/pending"

    def _aborted(self, name: str) -> str:
        return f"{self.path(name)}/aborted"

    async def names(self) -> list[str]:
        try:
            return sorted(await self._zk.get_children(self.root))
        except ZkNoNodeError:
            return []

    async def ensure(self, name: str) -> None:
        """Create the log if it does not exist (idempotent, safe against concurrent creators)."""
        path = self.path(name)
        # ``aborted`` is made last (and came later: a log made before it gets it here).
        if await self._zk.exists(f"{path}/aborted") is not None:
            return
        await self._zk.ensure_path(self.root)
        for node, value in ((path, _LogHeader().to_bytes()), (f"{path}/commits", b""),
                            (f"{path}/pending", b""), (f"{path}/aborted", b"")):
            with contextlib.suppress(ZkNodeExistsError):
                await self._zk.create(node, value)

    async def exists(self, name: str) -> bool:
        return await self._zk.exists(self.path(name)) is not None

    async def next_seq(self, name: str) -> int:
        """The number the log's next commit will get (0 for a log not made yet). Commits are
        numbered without gaps, so a number below this one that no commit carries was removed
        (truncated or overwritten): a streaming reader's offsets rest on this."""
        got = await self._get_or_none(self.path(name))
        return 0 if got is None else _LogHeader.from_bytes(got[0], self.path(name)).next

    # ---- writers ---------------------------------------------------------------------------

    async def register_pending(self, name: str, ledger_id: int, write_id: str) -> None:
        """Note that ``write_id`` is writing ``ledger_id``, before the ledger holds anything.

        Refused with :class:`IllegalOpError` if the write was aborted, seen *after* registering:
        an abort that came before is seen here, one that comes after finds the pending znode in
        its sweep. Refused, the ledger is no longer pending; the caller deletes it."""
        pending = f"{self._pending(name)}/{ledger_id}"
        await self._zk.create(pending, check_write_id(write_id).encode())
        if await self.is_aborted(name, write_id):
            # Claimed here or by the abort's sweep (which deletes the ledger too): either way
            # gone from pending/, so no commit can name it.
            await self.claim_pending(name, ledger_id)
            raise IllegalOpError(
                f"log {name!r}: write {write_id!r} was aborted; ledger {ledger_id} is not kept "
                "(a task that outlived its job's abort)"
            )

    async def is_aborted(self, name: str, write_id: str) -> bool:
        return await self._zk.exists(f"{self._aborted(name)}/{write_id}") is not None

    async def abort(self, name: str, write_id: str) -> list[int]:
        """Mark ``write_id`` aborted, then claim every ledger it has pending; returns those
        ledger ids, for the caller to delete. From then on the write can neither register a
        ledger nor commit. The marker first: a writer registering after the sweep's listing
        then finds it (see :meth:`register_pending`)."""
        check_write_id(write_id)
        await self.ensure(name)  # a late first task would make the log: the marker must be there
        with contextlib.suppress(ZkNodeExistsError):
            await self._zk.create(f"{self._aborted(name)}/{write_id}", b"")
        return await self.claim_write(name, write_id)

    async def claim_write(self, name: str, write_id: str) -> list[int]:
        """Claim (:meth:`claim_pending`) every ledger ``write_id`` has pending; returns their
        ids, for the caller to delete."""
        return [
            ledger_id for ledger_id, owner in (await self.pending(name)).items()
            if owner.write_id == write_id and await self.claim_pending(name, ledger_id)
        ]

    async def aborted_writes(self, name: str) -> dict[str, int]:
        """The aborted writes' markers: write id -> when it was aborted (ctime, ms)."""
        return {c: stat.ctime for c, (_, stat) in (await self._children_of(self._aborted(name))).items()}

    async def forget_aborted(self, name: str, write_id: str) -> bool:
        """Remove an aborted write's marker (garbage collection's call: see
        :mod:`bkmeta.log_gc`); False if it was gone."""
        return await self._delete_if_there(f"{self._aborted(name)}/{write_id}")

    async def pending(self, name: str) -> dict[int, PendingLedger]:
        """Ledgers registered by writes and not yet committed or swept, by ledger id."""
        return {
            int(c): PendingLedger(data.decode(), stat.ctime)
            for c, (data, stat) in (await self._children_of(self._pending(name))).items()
        }

    async def claim_pending(self, name: str, ledger_id: int) -> bool:
        """Remove a pending znode so that no commit can take its ledger any more (a commit
        deletes it in its own transaction); False if it was gone, i.e. committed or removed."""
        return await self._delete_if_there(f"{self._pending(name)}/{ledger_id}")

    async def _children_of(self, base: str) -> dict[str, tuple[bytes, Any]]:
        """Each child of ``base`` with its data and stat, read together (none if ``base`` is
        missing; a child gone meanwhile is left out)."""
        try:
            children = await self._zk.get_children(base)
        except ZkNoNodeError:
            return {}
        found = await asyncio.gather(*(self._get_or_none(f"{base}/{c}") for c in children))
        return {c: got for c, got in zip(children, found, strict=True) if got is not None}

    async def _delete_if_there(self, path: str) -> bool:
        try:
            await self._zk.delete(path)
        except ZkNoNodeError:
            return False
        return True

    async def _get_or_none(self, path: str) -> tuple[bytes, Any] | None:
        try:
            return await self._zk.get(path)
        except ZkNoNodeError:
            return None

    # ---- the committed log -----------------------------------------------------------------

    async def segments(self, name: str) -> list[LogSegment]:
        """The log's segments in commit order; a log that does not exist is an error."""
        return [seg for commit in await self.commits(name) for seg in commit.segments]

    async def commits(self, name: str) -> list[LogCommit]:
        """Every commit of the log, in order. A commit that vanishes while being read (an
        overwrite under way) restarts the read: a reader never gets part of a log."""
        if not await self.exists(name):
            raise IncorrectParameterError(f"log {name!r} does not exist under {self.root}")
        base = self._commits(name)
        for _ in range(_READ_ATTEMPTS):
            found = await self._read_commits(base, sorted(await self._zk.get_children(base)))
            if all(commit is not None for commit in found):
                return [commit for commit in found if commit is not None]
        raise MetadataVersionError(f"log {name!r} kept changing while it was read ({_READ_ATTEMPTS} tries)")

    async def _read_commits(self, base: str, nodes: list[str]) -> list[LogCommit | None]:
        """The records of commit znodes ``nodes`` under ``base``, read together; ``None`` for
        one gone meanwhile."""
        found = await asyncio.gather(*(self._get_or_none(f"{base}/{node}") for node in nodes))
        return [
            None if got is None else LogCommit.from_bytes(node, got[0], f"{base}/{node}", got[1].ctime)
            for node, got in zip(nodes, found, strict=True)
        ]

    async def commit_of(self, name: str, write_id: str) -> LogCommit | None:
        """The commit of ``write_id``, if it committed (and was not overwritten since)."""
        base = self._commits(name)
        try:
            children = await self._zk.get_children(base)
        except ZkNoNodeError:
            return None
        for node in children:
            if node.partition("-")[2] == write_id:
                got = await self._get_or_none(f"{base}/{node}")
                if got is not None:
                    return LogCommit.from_bytes(node, got[0], f"{base}/{node}")
        return None

    async def commit(
        self,
        name: str,
        write_id: str,
        segments: Sequence[LogSegment],
        *,
        overwrite: bool = False,
        txn: tuple[str, int] | None = None,
    ) -> CommitResult:
        """Append ``segments`` (in the given order; each registered as pending by this write)
        to the log in one transaction, or with ``overwrite`` make them the whole log. ``txn`` =
        (app id, version): refused, with ``committed=False``, if that app already committed
        this version or a later one. Committing the same write again returns its commit. An
        aborted write is refused with :class:`IllegalOpError`. The log must exist, made by
        :meth:`ensure` (which gives a log made before aborts had markers its ``aborted/``)."""
        path = self.path(name)
        check_write_id(write_id)
        tried: dict[str, tuple[LogSegment, ...]] = {}  # commit node -> what it replaced
        for attempt in range(_COMMIT_ATTEMPTS):
            data, stat = await self._zk.get(path)
            header = _LogHeader.from_bytes(data, path)
            if txn is not None:
                app_id, version = txn
                last = header.txns.get(app_id)
                if last is not None and version <= last:
                    # This very commit, made before (its reply lost)? Not another batch that
                    # shares its write id: a replay brings new ledgers.
                    prior = await self.commit_of(name, write_id)
                    if prior is not None and prior.segments == tuple(segments):
                        return CommitResult(True, prior.segments)
                    return CommitResult(committed=False, last_version=last)
                header.txns[app_id] = version
            replaced = await self.commits(name) if overwrite else []
            node = f"{header.next:010d}-{write_id}"
            header.next += 1
            record = LogCommit(node, write_id, tuple(segments)).to_bytes()
            marker = f"{self._aborted(name)}/{write_id}"
            ops: list[tuple[str, str, bytes, int]] = [("set", path, header.to_bytes(), stat.version)]
            # The write's abort marker made and removed: this fails if it exists, so a write
            # aborted at any moment before this transaction can never commit.
            ops += [("create", marker, b"", -1), ("delete", marker, b"", -1)]
            ops += [("delete", f"{self._commits(name)}/{c.node}", b"", -1) for c in replaced]
            ops.append(("create", f"{self._commits(name)}/{node}", record, -1))
            ops += [("delete", f"{self._pending(name)}/{seg.ledger_id}", b"", -1) for seg in segments]
            size = sum(len(op[1]) + len(op[2]) + 16 for op in ops)
            if size > MAX_COMMIT_BYTES:
                raise IncorrectParameterError(
                    f"log {name!r}: a commit of {len(segments)} segments"
                    + (f" replacing {len(replaced)} commits" if replaced else "")
                    + f" takes {size} bytes, over the {MAX_COMMIT_BYTES} a ZooKeeper request may "
                    "carry; write fewer partitions" + (" or overwrite a shorter log" if replaced else "")
                )
            tried[node] = tuple(seg for c in replaced for seg in c.segments)
            try:
                await self._zk.multi(ops)
            except (MetadataVersionError, ZkNodeExistsError, ZkNoNodeError, MetadataStoreError) as e:
                # A reply lost to a connection drop, its request applied: then our node is there.
                done = await self._landed(name, tried)
                if done is not None:
                    return CommitResult(True, tuple(segments), tried[done])
                if isinstance(e, ZkNodeExistsError) and await self.is_aborted(name, write_id):
                    raise IllegalOpError(
                        f"log {name!r}: write {write_id!r} was aborted; nothing was committed"
                    ) from e
                if isinstance(e, ZkNoNodeError) and await self._zk.exists(path) is not None:
                    # A pending znode is gone: this write committed before, or was aborted.
                    prior = await self.commit_of(name, write_id)
                    if prior is not None and prior.segments == tuple(segments):
                        return CommitResult(True, prior.segments)
                    raise IncorrectParameterError(
                        f"log {name!r}: write {write_id!r} has ledgers no longer pending "
                        "(aborted or swept); nothing was committed"
                    ) from e
                if not isinstance(e, MetadataVersionError | ZkNodeExistsError):
                    raise
                await asyncio.sleep(random.uniform(0, min(0.5, 0.005 * 2**attempt)))
                continue  # another commit came between our read and our write
            return CommitResult(True, tuple(segments), tried[node])
        raise MetadataVersionError(
            f"log {name!r}: commit lost to concurrent commits {_COMMIT_ATTEMPTS} times in a row"
        )

    async def truncate(self, name: str, before_seq: int) -> tuple[LogCommit, ...]:
        """Remove every commit numbered below ``before_seq``; returns the commits removed. Their
        ledgers are garbage, for the caller to delete (see :meth:`truncate_batches`)."""
        return tuple([c async for batch in self.truncate_batches(name, before_seq) for c in batch])

    async def truncate_batches(self, name: str, before_seq: int) -> AsyncIterator[tuple[LogCommit, ...]]:
        """Remove every commit numbered below ``before_seq``: retention, the oldest writes first.
        Yields the commits removed, one transaction at a time, so a caller that deletes their
        ledgers as they come has deleted every removed commit's ledgers even if a later
        transaction gives up.

        Each transaction also rewrites the log znode at the version read. So a commit or an
        overwrite that read the log before it retries (its own rewrite fails), rather than
        finding a commit it meant to replace gone and taking that for an aborted write. Each
        stays under the ZooKeeper request limit (a long log takes several). A reader that listed
        the removed commits before may then fail on a deleted ledger, as it may while a log is
        overwritten."""
        if not await self.exists(name):
            raise IncorrectParameterError(f"log {name!r} does not exist under {self.root}")
        path = self.path(name)
        base = self._commits(name)
        failures = 0
        while True:
            # Chosen by name (``<seq>-<write id>``), and only the batch's records read: a log
            # kept for retention can hold thousands of commits, and reading them all before
            # every transaction gave a stream appending meanwhile the time to move the header
            # under each one.
            doomed = sorted(c for c in await self._zk.get_children(base) if _seq_of(c) < before_seq)
            if not doomed:
                return
            data, _ = await self._zk.get(path)
            size = len(path) + len(data) + 16
            names: list[str] = []
            for node in doomed:
                size += len(base) + len(node) + 17
                if names and size > MAX_COMMIT_BYTES:
                    break
                names.append(node)
            batch = [commit for commit in await self._read_commits(base, names) if commit is not None]
            if not batch:
                continue  # gone meanwhile (an overwrite): list again
            # The version the transaction holds the log to, read last: a batch's records take
            # a while to read, and every commit made meanwhile would fail the transaction.
            data, stat = await self._zk.get(path)
            ops = [("set", path, data, stat.version)]
            ops += [("delete", f"{base}/{c.node}", b"", -1) for c in batch]
            try:
                await self._zk.multi(ops)
            except (MetadataVersionError, MetadataStoreError) as e:
                # Either not applied (a commit, overwrite or truncation came in between), or
                # applied with its reply lost: the client retries a call whose reply did not
                # come, and the retry then fails on the version our first try moved. Whatever
                # of the batch is gone now left the log, by us or by an overwrite (whose ledgers
                # are garbage too), so its ledgers go either way.
                await self._zk.sync(path)
                gone = tuple([c for c in batch if await self._zk.exists(f"{base}/{c.node}") is None])
                if gone:
                    yield gone
                failures += 1
                if failures >= _COMMIT_ATTEMPTS:
                    raise
                if isinstance(e, MetadataVersionError) and not gone:
                    await asyncio.sleep(random.uniform(0, min(0.5, 0.005 * 2**failures)))
                continue
            yield tuple(batch)

    async def _landed(self, name: str, tried: dict[str, tuple[LogSegment, ...]]) -> str | None:
        # After a reconnect the server may lag behind the one that took our request: catch up.
        await self._zk.sync(self.path(name))
        for node in tried:
            if await self._zk.exists(f"{self._commits(name)}/{node}") is not None:
                return node
        return None
