"""The bookie core: BookKeeper's rules (master key, fencing, LAC, durability) over DbLedgerStorage.

Implements :class:`bookie.api.BookieCore`. Per-op problems become that op's status; an unexpected
exception in the storage path becomes EIO for the ops it touched (logged), never a crash.

The add path is batched end to end: one write-cache admission, one journal submission and one
future per batch (per journal the batch touches, when there are several journal dirs); the
per-entry work is a header unpack, a few compares, a dict insert and a CRC.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from prometheus_client import CollectorRegistry

from bkproto.entry_format import HEADER, HEADER_SIZE, LAC_HEADER, MASTER_KEY_SIZE
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, AddResult, DiskInfo, JournalMark, LacInfo
from bookie.breakage import SKIP_FENCE_CHECK, SKIP_JOURNAL, deliberate_breakage
from bookie.errors import BookieError, bad_request, no_entry, no_ledger
from bookie.lac_waiters import LacWaiters
from bookie.storage.compaction import Compacted
from bookie.storage.config import StorageConfig
from bookie.storage.db_ledger_storage import DbLedgerStorage
from bookie.storage.health import StorageHealth
from bookie.storage.indexes import LedgerRecord
from bookie.storage.journal import Journal
from bookie.storage.journal_format import (
    entry_record_header,
    explicit_lac_record,
    fence_record,
    master_key_record,
)
from bookie.storage.ledger_directory import KvFactory, rocks_kv
from bookie.storage.log_garbage import LogUsage
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)

_OK = AddResult(bookie_pb2.EOK)
_READ_ONLY = AddResult(bookie_pb2.EREADONLY, "the bookie is read-only")
KEY_SIZE = MASTER_KEY_SIZE
_MAX_CACHED_LEDGERS = 100_000


@dataclass(slots=True)
class LedgerState:
    master_key: bytes
    fenced: bool
    explicit_lac_body: bytes | None
    lac: int
    lac_ts: int = 0


def _check_ids(ledger_id: int, entry_id: int | None = None) -> None:
    if ledger_id < 0:
        raise bad_request(f"ledger id {ledger_id} is negative")
    if entry_id is not None and entry_id < -1:
        raise bad_request(f"entry id {entry_id} is invalid")


def _check_key(master_key: bytes) -> None:
    if len(master_key) != MASTER_KEY_SIZE:
        raise bad_request(f"master key is {len(master_key)} bytes, expected {MASTER_KEY_SIZE}")


class Bookie:
    def __init__(
        self, config: StorageConfig, registry: CollectorRegistry, kv_factory: KvFactory = rocks_kv
    ) -> None:
        self.config = config
        self.stats = StorageStats(registry)
        self.storage = DbLedgerStorage(config, self.stats, kv_factory)
        self.waiters = LacWaiters(config.max_lac_waiters)
        self._ledgers: dict[int, LedgerState] = {}
        # Ledgers garbage collection is deleting right now: nothing may load or re-create them
        # until it is done, or an add accepted meanwhile would lose its record to the deletion.
        self._deleting: set[int] = set()
        self._read_only = False
        self._high_priority_writes = True
        # Only ever True in pybk verify's honesty tests (see bookie.breakage).
        breakage = deliberate_breakage()
        self._ignore_fence = SKIP_FENCE_CHECK in breakage
        self._skip_journal = SKIP_JOURNAL in breakage
        self._started = False

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await self.storage.start()
        self._started = True

    async def close(self) -> None:
        """Flush and checkpoint: a clean restart then replays nothing."""
        if not self._started:
            return
        self._started = False
        self.waiters.cancel_all()
        await self.storage.close()

    def abandon(self) -> None:
        """Tests only: drop the bookie as a crash would (no flush, no checkpoint)."""
        self._started = False
        self.storage.abandon()

    async def __aenter__(self) -> Bookie:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def high_priority_writes(self) -> bool:
        """Whether recovery adds are taken while read-only (BookKeeper's high-priority writes)."""
        return self._high_priority_writes

    @property
    def health(self) -> StorageHealth:
        return self.storage.health

    def set_write_mode(self, read_only: bool, high_priority_writes: bool = True) -> None:
        """Set by the state manager. A read-only bookie refuses adds with EREADONLY, except
        recovery adds while ``high_priority_writes``: a recovering client must be able to
        re-replicate the last entries of a ledger to the bookies of its last ensemble."""
        self._read_only = read_only
        self._high_priority_writes = high_priority_writes

    # ---- ledger state -----------------------------------------------------------------------

    def _state(self, ledger_id: int) -> LedgerState | None:
        state = self._ledgers.get(ledger_id)
        if state is not None:
            return state
        if ledger_id in self._deleting:
            return None
        record = self.storage.dir_for(ledger_id).ledgers.get(ledger_id)
        if record is None:
            return None
        lac = -1
        if record.explicit_lac is not None and len(record.explicit_lac) >= LAC_HEADER.size:
            lac = LAC_HEADER.unpack_from(record.explicit_lac)[1]
        last = self.storage.last_entry(ledger_id)
        if last >= 0:
            # once per ledger after a restart: the last entry's piggybacked LAC (usually cached)
            body = self.storage.write_cache.get(ledger_id, last) or self._read_sync(ledger_id, last)
            if body is not None:
                lac = max(lac, HEADER.unpack_from(body)[2])
        state = LedgerState(record.master_key, record.fenced, record.explicit_lac, lac)
        self._remember(ledger_id, state)
        return state

    def _read_sync(self, ledger_id: int, entry_id: int) -> bytes | None:
        run = self.storage.dir_for(ledger_id).read_run(ledger_id, entry_id, 1, 1)
        return run[0][1] if run else None

    def _remember(self, ledger_id: int, state: LedgerState) -> None:
        if len(self._ledgers) >= _MAX_CACHED_LEDGERS:
            self._ledgers.clear()  # bounded; states reload from the ledger index
        self._ledgers[ledger_id] = state

    def _keyed_state(self, ledger_id: int, master_key: bytes, parts: list[bytes]) -> LedgerState:
        """The ledger's state for a fence or LAC write: created (its master-key record joins
        ``parts``) if the bookie has not seen the ledger, EUA if the key is not the ledger's."""
        state = self._state(ledger_id)
        if state is None:
            if ledger_id in self._deleting:
                raise _being_deleted(ledger_id)
            return self._new_ledger(ledger_id, master_key, parts)
        if state.master_key != master_key and not self._adopt_key(ledger_id, state, master_key, parts):
            raise BookieError(bookie_pb2.EUA, f"wrong master key for ledger {ledger_id}")
        return state

    def _adopt_key(self, ledger_id: int, state: LedgerState, master_key: bytes, parts: list[bytes]) -> bool:
        """A ledger recorded without a master key (``rebuild-db-ledgers-index`` found no journal
        record of it) takes the first key a client presents, as BookKeeper's
        ``LedgerMetadataIndex.setMasterKey`` does; its record joins ``parts``. False if the
        ledger has a key already."""
        if state.master_key:
            return False
        state.master_key = master_key
        self._save(ledger_id, state)
        parts.append(master_key_record(ledger_id, master_key))
        return True

    def _new_ledger(self, ledger_id: int, master_key: bytes, parts: list[bytes]) -> LedgerState:
        """Record a ledger's key (index first, then its journal record: see DbLedgerStorage)."""
        state = LedgerState(master_key, False, None, -1)
        self.storage.dir_for(ledger_id).ledgers.put(ledger_id, LedgerRecord(master_key))
        self._remember(ledger_id, state)
        parts.append(master_key_record(ledger_id, master_key))
        return state

    def _save(self, ledger_id: int, state: LedgerState) -> None:
        record = LedgerRecord(state.master_key, state.fenced, state.explicit_lac_body)
        self.storage.dir_for(ledger_id).ledgers.put(ledger_id, record)

    def _advance_lac(self, ledger_id: int, state: LedgerState, lac: int) -> None:
        if lac > state.lac:
            state.lac = lac
            state.lac_ts = int(time.time() * 1000)
            self.waiters.notify(ledger_id, lac)

    # ---- adds -------------------------------------------------------------------------------

    async def add_entries(self, ops: Sequence[AddOp]) -> list[AddResult]:
        journals = self.storage.journals
        if len(journals) == 1:
            return await self._add_through(journals[0], ops)
        # Several journals: the adds of each journal's ledgers form a group of their own, and the
        # groups go through their journals side by side.
        groups: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            groups.setdefault(self.storage.journal_index(op.ledger_id), []).append(i)
        outcomes = await asyncio.gather(
            *(self._add_through(journals[j], [ops[i] for i in members]) for j, members in groups.items())
        )
        results: list[AddResult] = [_OK] * len(ops)
        for members, group_results in zip(groups.values(), outcomes, strict=True):
            for i, result in zip(members, group_results, strict=True):
                results[i] = result
        return results

    async def _add_through(self, journal: Journal, ops: Sequence[AddOp]) -> list[AddResult]:
        """Stage ``ops`` (all of ledgers of ``journal``) and wait until ``journal`` synced them."""
        results: list[AddResult] = [_OK] * len(ops)
        accepted: list[int] = []
        try:
            if self._read_only and not self._high_priority_writes:
                return [_READ_ONLY] * len(ops)
            await self.storage.make_room(sum(len(op.body) for op in ops))
            parts: list[bytes] = []
            lacs: dict[int, int] = {}
            nbytes = self._stage(ops, results, accepted, parts, lacs)
            if not parts:
                return results
            self._publish_lacs(lacs)
            if not self._skip_journal:
                await journal.submit(parts, nbytes, len(accepted))
        except BookieError as exc:
            failed = AddResult(exc.status, exc.message)
            for i in accepted or range(len(ops)):
                if results[i] is _OK:
                    results[i] = failed
            return results
        except Exception as exc:
            log.exception("add of %d entries failed", len(ops))
            failed = AddResult(bookie_pb2.EIO, f"storage error: {exc}")
            return [failed if r is _OK else r for r in results]
        return results

    def _publish_lacs(self, lacs: dict[int, int]) -> None:
        """Make the piggybacked LACs of staged entries (highest per ledger, gathered by
        :meth:`_stage`) visible to readers and long polls.

        Done as soon as the entries are in the write cache, before their journal fsync (as
        BookKeeper does): the LAC carried by entry N names entries the writer already saw
        acknowledged by an ack quorum, so it is true whether or not N itself becomes durable, and
        tailing readers save a full fsync of latency."""
        for ledger_id, lac in lacs.items():
            state = self._ledgers.get(ledger_id) or self._state(ledger_id)
            if state is not None:
                self._advance_lac(ledger_id, state, lac)

    def _stage(
        self,
        ops: Sequence[AddOp],
        results: list[AddResult],
        accepted: list[int],
        parts: list[bytes],
        lacs: dict[int, int],
    ) -> int:
        """Validate each op, put accepted entries in the write cache, encode their journal
        records and note the highest piggybacked LAC per ledger in ``lacs`` (all synchronous: no
        other coroutine runs in between). Returns journal bytes."""
        half = self.storage.write_cache.active
        unpack = HEADER.unpack_from
        record_header = entry_record_header
        states = self._ledgers
        writable = not self._read_only  # else only recovery adds (see set_write_mode)
        nbytes = 0
        for i, op in enumerate(ops):
            body = op.body
            ledger_id = op.ledger_id
            entry_id = op.entry_id
            if len(body) < HEADER_SIZE or ledger_id < 0 or entry_id < 0 or len(op.master_key) != KEY_SIZE:
                results[i] = AddResult(bookie_pb2.EBADREQ, _bad_add(op))
                continue
            h_ledger, h_entry, lac, _ = unpack(body)
            if h_ledger != ledger_id or h_entry != entry_id:
                results[i] = AddResult(
                    bookie_pb2.EBADREQ,
                    f"entry header says {h_ledger}/{h_entry}, request says {ledger_id}/{entry_id}",
                )
                continue
            if not writable and not op.recovery:
                results[i] = _READ_ONLY
                continue
            state = states.get(ledger_id) or self._state(ledger_id)
            if state is None:
                if ledger_id in self._deleting:
                    results[i] = AddResult(bookie_pb2.EIO, _being_deleted(ledger_id).message)
                    continue
                state = self._new_ledger(ledger_id, op.master_key, parts)
            elif state.master_key != op.master_key and not self._adopt_key(
                ledger_id, state, op.master_key, parts
            ):
                results[i] = AddResult(bookie_pb2.EUA, f"wrong master key for ledger {ledger_id}")
                continue
            if state.fenced and not op.recovery and not self._ignore_fence:
                results[i] = AddResult(bookie_pb2.EFENCED, f"ledger {ledger_id} is fenced")
                continue
            # write cache BEFORE the journal record: the LastLogMark rule (DbLedgerStorage)
            half.put(ledger_id, entry_id, body)
            parts.append(record_header(body))
            parts.append(body)
            nbytes += len(body) + 9
            accepted.append(i)
            if lac > lacs.get(ledger_id, -2):
                lacs[ledger_id] = lac
        self.storage.after_put()
        return nbytes

    # ---- reads ------------------------------------------------------------------------------

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        _check_ids(ledger_id, entry_id)
        try:
            if self._state(ledger_id) is None:
                raise no_ledger(ledger_id)
            if entry_id == -1:
                entry_id = self.storage.last_entry(ledger_id)
                if entry_id < 0:
                    raise no_entry(ledger_id, -1)
            body = await self.storage.read(ledger_id, entry_id)
        except BookieError:
            raise
        except Exception as exc:
            log.exception("read of %d/%d failed", ledger_id, entry_id)
            raise BookieError(bookie_pb2.EIO, f"storage error reading {ledger_id}/{entry_id}: {exc}") from exc
        if body is None:
            raise no_entry(ledger_id, entry_id)
        return body

    async def read_entries(
        self,
        ledger_id: int,
        first_entry_id: int,
        max_count: int,
        max_bytes: int,
        *,
        stride: int = 1,
        last_entry_id: int | None = None,
    ) -> list[bytes]:
        _check_ids(ledger_id, first_entry_id)
        if first_entry_id < 0:
            raise bad_request(f"first entry id {first_entry_id} is negative")
        if stride < 1:
            raise bad_request(f"stride {stride} must be positive")
        out = [await self.read_entry(ledger_id, first_entry_id)]
        size = len(out[0])
        entry_id = first_entry_id + stride
        while len(out) < max_count and (last_entry_id is None or entry_id <= last_entry_id):
            try:
                body = await self.read_entry(ledger_id, entry_id)
            except BookieError as exc:
                if exc.status == bookie_pb2.ENOENTRY:
                    break
                raise
            if size + len(body) > max_bytes:
                break
            out.append(body)
            size += len(body)
            entry_id += stride
        return out

    def last_add_confirmed(self, ledger_id: int) -> int:
        state = self._state(ledger_id) if ledger_id >= 0 else None
        return -1 if state is None else state.lac

    def lac_update_timestamp(self, ledger_id: int) -> int:
        state = self._state(ledger_id) if ledger_id >= 0 else None
        return 0 if state is None else state.lac_ts

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        _check_ids(ledger_id)
        return await self.waiters.wait(
            ledger_id, previous_lac, timeout_s, lambda: self.last_add_confirmed(ledger_id)
        )

    async def read_lac(self, ledger_id: int) -> LacInfo:
        _check_ids(ledger_id)
        state = self._state(ledger_id)
        if state is None:
            raise no_ledger(ledger_id)
        last: bytes | None = None
        try:
            last = await self.read_entry(ledger_id, -1)
        except BookieError as exc:
            if exc.status != bookie_pb2.ENOENTRY:
                raise
        return LacInfo(state.explicit_lac_body, last)

    async def list_entries(self, ledger_id: int) -> list[tuple[int, int]]:
        _check_ids(ledger_id)
        if self._state(ledger_id) is None:
            raise no_ledger(ledger_id)
        runs: list[tuple[int, int]] = []
        for entry_id in await self.storage.entry_ids(ledger_id):
            if runs and runs[-1][1] == entry_id - 1:
                runs[-1] = (runs[-1][0], entry_id)
            else:
                runs.append((entry_id, entry_id))
        return runs

    # ---- fence / explicit LAC / force -------------------------------------------------------

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        _check_ids(ledger_id)
        _check_key(master_key)
        parts: list[bytes] = []
        state = self._keyed_state(ledger_id, master_key, parts)
        state.fenced = True
        self._save(ledger_id, state)
        parts.append(fence_record(ledger_id))
        await self._journal(ledger_id, parts)

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> None:
        _check_ids(ledger_id)
        _check_key(master_key)
        if len(body) < LAC_HEADER.size:
            raise bad_request(f"LAC body is {len(body)} bytes, shorter than its 16-byte header")
        body_ledger, body_lac = LAC_HEADER.unpack_from(body)
        if body_ledger != ledger_id or body_lac != lac:
            raise bad_request(f"LAC body says {body_ledger}/{body_lac}, request says {ledger_id}/{lac}")
        parts: list[bytes] = []
        state = self._keyed_state(ledger_id, master_key, parts)
        state.explicit_lac_body = body
        self._save(ledger_id, state)
        parts.append(explicit_lac_record(ledger_id, lac, body))
        await self._journal(ledger_id, parts)
        self._advance_lac(ledger_id, state, lac)

    async def force_ledger(self, ledger_id: int) -> None:
        _check_ids(ledger_id)
        if self._state(ledger_id) is None:
            raise no_ledger(ledger_id)
        # a barrier: completes after everything queued before it in the ledger's journal is synced
        await self._journal(ledger_id, [])

    async def _journal(self, ledger_id: int, parts: list[bytes]) -> None:
        try:
            await self.storage.journal_for(ledger_id).submit(parts, sum(map(len, parts)), len(parts))
        except BookieError:
            raise
        except Exception as exc:
            log.exception("journal submission failed")
            raise BookieError(bookie_pb2.EIO, f"journal error: {exc}") from exc

    # ---- info -------------------------------------------------------------------------------

    def disk_info(self) -> DiskInfo:
        total = free = 0
        seen: set[int] = set()
        for directory in self.config.ledger_dirs:
            st = os.statvfs(directory)
            if st.f_fsid in seen:
                continue  # several dirs on one filesystem count once
            seen.add(st.f_fsid)
            total += st.f_blocks * st.f_frsize
            free += st.f_bavail * st.f_frsize
        return DiskInfo(total_bytes=total, free_bytes=free)

    # ---- garbage collection (bookie.gc.GcStorage) -------------------------------------------

    async def local_ledger_ids(self) -> set[int]:
        return await self.storage.local_ledger_ids()

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """Forget the ledgers (their metadata is gone). While that runs, their adds, fences and
        LAC writes fail with EIO; one arriving later starts the ledger afresh, as in BookKeeper
        (a writer that missed the deletion), and the next collection deletes it again."""
        self._deleting.update(ledger_ids)
        for ledger_id in ledger_ids:
            self._ledgers.pop(ledger_id, None)
        deletion = asyncio.ensure_future(self.storage.delete_ledgers(ledger_ids))
        # the refusal ends with the deletion itself, even if this call is cancelled before that
        deletion.add_done_callback(lambda _: self._deleting.difference_update(ledger_ids))
        await asyncio.shield(deletion)

    async def reclaim_entry_logs(self) -> LogUsage:
        return await self.storage.reclaim_entry_logs()

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted:
        return await self.storage.compact_entry_logs(threshold, rate_bytes, stop)

    def last_log_marks(self) -> list[JournalMark]:
        dirs = self.storage.config.journal_dirs
        return [JournalMark(Path(d), mark) for d, mark in zip(dirs, self.storage.marks, strict=True)]


def _being_deleted(ledger_id: int) -> BookieError:
    return BookieError(bookie_pb2.EIO, f"ledger {ledger_id} is being deleted by garbage collection")


def _bad_add(op: AddOp) -> str:
    if op.ledger_id < 0 or op.entry_id < 0:
        return f"ids {op.ledger_id}/{op.entry_id} are negative"
    if len(op.master_key) != MASTER_KEY_SIZE:
        return f"master key is {len(op.master_key)} bytes, expected {MASTER_KEY_SIZE}"
    return f"entry body is {len(op.body)} bytes, shorter than its {HEADER_SIZE}-byte header"
