"""The bookie core: BookKeeper's rules (master key, fencing, LAC) over a :class:`LedgerStorage`.

Implements :class:`bookie.api.BookieCore`. Per-op problems become that op's status; an unexpected
exception in the storage path becomes EIO for the ops it touched (logged), never a crash. The
storage decides how things become durable (``DbLedgerStorage``: journal and write cache; the
simulation's ``MemoryLedgerStorage``: a modelled disk); ``bookie.on_disk.bookie_on_disk``
builds the daemon's.

The add path is batched end to end: per batch one storage admission (``make_room``), one
validation pass and one ``write``, which ``DbLedgerStorage`` turns into one write-cache admission,
one journal submission and one future (per journal the batch touches, when there are several
journal dirs); the per-entry work is a header unpack, a few compares, a dict insert and a CRC.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from operator import itemgetter
from types import TracebackType

from bkproto.entry_format import HEADER, HEADER_SIZE, LAC_HEADER, MASTER_KEY_SIZE
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, AddResult, DiskInfo, JournalMark, LacInfo, malformed_add
from bookie.breakage import SKIP_FENCE_CHECK, SKIP_JOURNAL, deliberate_breakage
from bookie.errors import BookieError, bad_request, no_entry, no_ledger
from bookie.lac_waiters import LacWaiters
from bookie.ledger_descriptor import LedgerDescriptor, LedgerDescriptors
from bookie.storage.api import LedgerStorage, LedgerUpdate, UpdateKind
from bookie.storage.compaction import Compacted
from bookie.storage.config import StorageConfig
from bookie.storage.health import StorageHealth
from bookie.storage.log_garbage import LogFacts, LogUsage

log = logging.getLogger(__name__)

_OK = AddResult(bookie_pb2.EOK)
_READ_ONLY = AddResult(bookie_pb2.EREADONLY, "the bookie is read-only")
KEY_SIZE = MASTER_KEY_SIZE
DEFAULT_MAX_LAC_WAITERS = StorageConfig.max_lac_waiters
# An AddOp's fields and an entry header's, read in C by map() over a whole batch
_LEDGER_ID = itemgetter(0)
_ENTRY_ID = itemgetter(1)
_MASTER_KEY = itemgetter(2)
_BODY = itemgetter(3)
_RECOVERY = itemgetter(4)
_HEADER_LAC = itemgetter(2)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


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
        self,
        storage: LedgerStorage,
        *,
        max_lac_waiters: int = DEFAULT_MAX_LAC_WAITERS,
        wall_clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        """``wall_clock_ms`` stamps LAC updates (a simulation passes its own clock)."""
        self.storage = storage
        self.waiters = LacWaiters(max_lac_waiters)
        self._wall_clock_ms = wall_clock_ms
        self._ledgers = LedgerDescriptors(storage)
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

    # ---- ledger descriptors -----------------------------------------------------------------

    def _keyed(self, ledger_id: int, master_key: bytes, updates: list[LedgerUpdate]) -> LedgerDescriptor:
        """The ledger's descriptor for a fence or LAC write: created (its master-key update joins
        ``updates``) if the bookie has not seen the ledger, EUA if the key is not the ledger's."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._ledgers.deleting:
                raise _being_deleted(ledger_id)
            return self._new_ledger(ledger_id, master_key, updates)
        if ledger.master_key != master_key and not _adopt_key(ledger_id, ledger, master_key, updates):
            raise BookieError(bookie_pb2.EUA, f"wrong master key for ledger {ledger_id}")
        return ledger

    def _new_ledger(self, ledger_id: int, master_key: bytes, updates: list[LedgerUpdate]) -> LedgerDescriptor:
        updates.append(LedgerUpdate(ledger_id, UpdateKind.MASTER_KEY, master_key))
        return self._ledgers.create(ledger_id, master_key)

    @property
    def _readers_waiting(self) -> bool:
        """Whether long polls are parked: the LAC a write publishes may wake them, and their
        answers must not wait behind its sync on the loop's thread (``keep_loop_free``)."""
        return self.waiters.parked > 0

    def _advance_lac(self, ledger_id: int, ledger: LedgerDescriptor, lac: int) -> None:
        if lac > ledger.lac:
            ledger.lac = lac
            ledger.lac_ts = self._wall_clock_ms()
            self.waiters.notify(ledger_id, lac)

    # ---- adds -------------------------------------------------------------------------------

    async def add_entries(self, ops: Sequence[AddOp]) -> list[AddResult]:
        """Validate and write the batch, then wait until the storage made it durable."""
        results: list[AddResult] = [_OK] * len(ops)
        accepted: list[AddOp] = []
        try:
            if self._read_only and not self._high_priority_writes:
                return _failed(self._refuse_misshapen(ops, results), _READ_ONLY)
            try:
                await self.storage.make_room(sum(map(len, map(_BODY, ops))))
            except Exception:
                self._refuse_misshapen(ops, results)  # those keep their own status
                raise
            updates: list[LedgerUpdate] = []
            lacs: dict[int, int] = {}
            self._validate(ops, results, accepted, updates, lacs)
            if not accepted and not updates:
                return results
            durable = self.storage.write(updates, accepted, keep_loop_free=self._readers_waiting)
            self._publish_lacs(lacs)
            if self._skip_journal:
                _never_journaled(durable)
            else:
                await durable
        except BookieError as exc:
            return _failed(results, AddResult(exc.status, exc.message))
        except Exception as exc:
            log.exception("add of %d entries failed", len(ops))
            return _failed(results, AddResult(bookie_pb2.EIO, f"storage error: {exc}"))
        return results

    def _publish_lacs(self, lacs: dict[int, int]) -> None:
        """Make the piggybacked LACs of written entries (highest per ledger, gathered by
        :meth:`_validate`) visible to readers and long polls.

        Done as soon as the entries are readable, before they are durable (as BookKeeper does):
        the LAC carried by entry N names entries the writer already saw acknowledged by an ack
        quorum, so it is true whether or not N itself becomes durable, and tailing readers save a
        full fsync of latency."""
        for ledger_id, lac in lacs.items():
            ledger = self._ledgers.get(ledger_id)
            if ledger is not None:
                self._advance_lac(ledger_id, ledger, lac)

    def _validate(
        self,
        ops: Sequence[AddOp],
        results: list[AddResult],
        accepted: list[AddOp],
        updates: list[LedgerUpdate],
        lacs: dict[int, int],
    ) -> None:
        """Check each op against BookKeeper's rules: the accepted ones go to ``accepted``, the
        master keys of ledgers new to the bookie to ``updates``, the highest piggybacked LAC per
        ledger to ``lacs``; a refused op gets its status in ``results``."""
        if self._accept_whole(ops, accepted, updates, lacs):
            return
        unpack = HEADER.unpack_from
        ledgers = self._ledgers.cached
        writable = not self._read_only  # else only recovery adds (see set_write_mode)
        for i, op in enumerate(ops):
            body = op.body
            ledger_id = op.ledger_id
            entry_id = op.entry_id
            # malformed_add's checks and the key's size, inlined: this loop runs once per entry.
            if len(body) < HEADER_SIZE or ledger_id < 0 or entry_id < 0 or len(op.master_key) != KEY_SIZE:
                results[i] = _bad_add(op)
                continue
            h_ledger, h_entry, lac, _ = unpack(body)
            if h_ledger != ledger_id or h_entry != entry_id:
                results[i] = _bad_add(op)
                continue
            if not writable and not op.recovery:
                results[i] = _READ_ONLY
                continue
            ledger = ledgers.get(ledger_id) or self._ledgers.get(ledger_id)
            if ledger is None:
                if ledger_id in self._ledgers.deleting:
                    results[i] = AddResult(bookie_pb2.EIO, _being_deleted(ledger_id).message)
                    continue
                ledger = self._new_ledger(ledger_id, op.master_key, updates)
            elif ledger.master_key != op.master_key and not _adopt_key(
                ledger_id, ledger, op.master_key, updates
            ):
                results[i] = AddResult(bookie_pb2.EUA, f"wrong master key for ledger {ledger_id}")
                continue
            if ledger.fenced and not op.recovery and not self._ignore_fence:
                results[i] = AddResult(bookie_pb2.EFENCED, f"ledger {ledger_id} is fenced")
                continue
            accepted.append(op)
            if lac > lacs.get(ledger_id, -2):
                lacs[ledger_id] = lac

    def _accept_whole(
        self, ops: Sequence[AddOp], accepted: list[AddOp], updates: list[LedgerUpdate], lacs: dict[int, int]
    ) -> bool:
        """:meth:`_validate` of the usual batch, one ledger's adds that all pass, as a few C-level
        passes over the whole batch instead of a Python loop per entry (the loop was the largest
        single share of the bookie's add path). True if it accepted every op; False, having changed
        nothing, for any batch it does not decide alone (several ledgers, a refusal, recovery adds,
        a new key for a keyless ledger): the per-op loop then decides each op as before."""
        count = len(ops)
        if not count or self._read_only:  # read-only: only recovery adds, op by op
            return False
        ledger_id, _, master_key, *_ = ops[0]
        bodies = list(map(_BODY, ops))
        if (
            ledger_id < 0
            or len(master_key) != KEY_SIZE
            or list(map(_LEDGER_ID, ops)).count(ledger_id) != count
            or list(map(_MASTER_KEY, ops)).count(master_key) != count
            or min(map(len, bodies)) < HEADER_SIZE
        ):
            return False
        entry_ids = list(map(_ENTRY_ID, ops))
        headers = list(map(HEADER.unpack_from, bodies))
        if (
            min(entry_ids) < 0
            or list(map(_LEDGER_ID, headers)).count(ledger_id) != count
            or list(map(_ENTRY_ID, headers)) != entry_ids
        ):
            return False
        ledger = self._ledgers.cached.get(ledger_id) or self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._ledgers.deleting:
                return False
            self._new_ledger(ledger_id, master_key, updates)
        elif ledger.master_key != master_key or (
            ledger.fenced and not self._ignore_fence and not all(map(_RECOVERY, ops))
        ):
            return False
        accepted.extend(ops)
        lac = max(map(_HEADER_LAC, headers))
        if lac > -2:
            lacs[ledger_id] = lac
        return True

    def _refuse_misshapen(self, ops: Sequence[AddOp], results: list[AddResult]) -> list[AddResult]:
        """``results`` with the refusal of each op that :meth:`_validate` would refuse whatever
        the ledger's state (its shape, or read-only): when the whole batch fails before
        validation, those ops still get their own status, as the contract says."""
        writable = not self._read_only
        for i, op in enumerate(ops):
            refusal = malformed_add(op)
            if refusal is not None:
                results[i] = refusal
            elif not writable and not op.recovery:
                results[i] = _READ_ONLY
        return results

    # ---- reads ------------------------------------------------------------------------------

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        _check_ids(ledger_id, entry_id)
        try:
            if self._ledgers.get(ledger_id) is None:
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
        if last_entry_id is not None:
            max_count = min(max_count, max(1, (last_entry_id - first_entry_id) // stride + 1))
        try:
            if self._ledgers.get(ledger_id) is None:
                raise no_ledger(ledger_id)
            # one storage call for the whole range: its caches and entry logs are read in bulk
            bodies = await self.storage.read_range(ledger_id, first_entry_id, max_count, max_bytes, stride)
        except BookieError:
            raise
        except Exception as exc:
            log.exception("read of %d/%d.. failed", ledger_id, first_entry_id)
            raise BookieError(
                bookie_pb2.EIO, f"storage error reading {ledger_id}/{first_entry_id}..: {exc}"
            ) from exc
        if not bodies:
            raise no_entry(ledger_id, first_entry_id)
        return bodies

    def last_add_confirmed(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id) if ledger_id >= 0 else None
        return -1 if ledger is None else ledger.lac

    def lac_update_timestamp(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id) if ledger_id >= 0 else None
        return 0 if ledger is None else ledger.lac_ts

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        _check_ids(ledger_id)
        return await self.waiters.wait(
            ledger_id, previous_lac, timeout_s, lambda: self.last_add_confirmed(ledger_id)
        )

    async def read_lac(self, ledger_id: int) -> LacInfo:
        _check_ids(ledger_id)
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise no_ledger(ledger_id)
        last: bytes | None = None
        try:
            last = await self.read_entry(ledger_id, -1)
        except BookieError as exc:
            if exc.status != bookie_pb2.ENOENTRY:
                raise
        return LacInfo(ledger.explicit_lac_body, last)

    async def list_entries(self, ledger_id: int) -> list[tuple[int, int]]:
        _check_ids(ledger_id)
        if self._ledgers.get(ledger_id) is None:
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
        updates: list[LedgerUpdate] = []
        ledger = self._keyed(ledger_id, master_key, updates)
        ledger.fenced = True
        updates.append(LedgerUpdate(ledger_id, UpdateKind.FENCE))
        await self._write_durably(updates)

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> None:
        _check_ids(ledger_id)
        _check_key(master_key)
        if len(body) < LAC_HEADER.size:
            raise bad_request(f"LAC body is {len(body)} bytes, shorter than its 16-byte header")
        body_ledger, body_lac = LAC_HEADER.unpack_from(body)
        if body_ledger != ledger_id or body_lac != lac:
            raise bad_request(f"LAC body says {body_ledger}/{body_lac}, request says {ledger_id}/{lac}")
        updates: list[LedgerUpdate] = []
        ledger = self._keyed(ledger_id, master_key, updates)
        ledger.explicit_lac_body = body
        updates.append(LedgerUpdate(ledger_id, UpdateKind.EXPLICIT_LAC, body))
        # applied now, durable when awaited
        durable = self.storage.write(updates, (), keep_loop_free=self._readers_waiting)
        # Published before it is durable, as an add's piggybacked LAC is (see _publish_lacs): the
        # writer saw these entries acknowledged by an ack quorum, so the LAC is true either way,
        # and long polls waiting for it should not wait for a journal sync too.
        self._advance_lac(ledger_id, ledger, lac)
        await _storage_errors_as_eio(durable)

    async def force_ledger(self, ledger_id: int) -> None:
        _check_ids(ledger_id)
        if self._ledgers.get(ledger_id) is None:
            raise no_ledger(ledger_id)
        await _storage_errors_as_eio(self.storage.force(ledger_id))

    async def _write_durably(self, updates: list[LedgerUpdate]) -> None:
        await _storage_errors_as_eio(self.storage.write(updates, ()))

    # ---- info -------------------------------------------------------------------------------

    def disk_info(self) -> DiskInfo:
        return self.storage.disk_usage()

    # ---- garbage collection (bookie.gc.GcStorage) -------------------------------------------

    async def local_ledger_ids(self) -> set[int]:
        return await self.storage.local_ledger_ids()

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """Forget the ledgers (their metadata is gone). While that runs, their adds, fences and
        LAC writes fail with EIO; one arriving later starts the ledger afresh, as in BookKeeper
        (a writer that missed the deletion), and the next collection deletes it again."""
        self._ledgers.start_deleting(ledger_ids)
        deletion = asyncio.ensure_future(self.storage.delete_ledgers(ledger_ids))
        # the refusal ends with the deletion itself, even if this call is cancelled before that
        deletion.add_done_callback(lambda _: self._ledgers.done_deleting(ledger_ids))
        await asyncio.shield(deletion)

    async def reclaim_entry_logs(self) -> LogUsage:
        return await self.storage.reclaim_entry_logs()

    async def compact_entry_logs(
        self, threshold: float, rate_bytes: int, stop: threading.Event | None = None
    ) -> Compacted:
        return await self.storage.compact_entry_logs(threshold, rate_bytes, stop)

    async def entry_log_facts(self) -> list[LogFacts]:
        return await self.storage.entry_log_facts()

    def last_log_marks(self) -> list[JournalMark]:
        return self.storage.journal_marks()


def _adopt_key(
    ledger_id: int, ledger: LedgerDescriptor, master_key: bytes, updates: list[LedgerUpdate]
) -> bool:
    """A ledger recorded without a master key (``rebuild-db-ledgers-index`` found no journal
    record of it) takes the first key a client presents, as BookKeeper's
    ``LedgerMetadataIndex.setMasterKey`` does; its update joins ``updates``. False if the ledger
    has a key already."""
    if ledger.master_key:
        return False
    ledger.master_key = master_key
    updates.append(LedgerUpdate(ledger_id, UpdateKind.MASTER_KEY, master_key))
    return True


def _failed(results: list[AddResult], failure: AddResult) -> list[AddResult]:
    """``results`` with every op not refused already (each accepted one) failed by ``failure``."""
    return [failure if result is _OK else result for result in results]


async def _storage_errors_as_eio(durable: Awaitable[None]) -> None:
    try:
        await durable
    except BookieError:
        raise
    except Exception as exc:
        log.exception("storage write failed")
        raise BookieError(bookie_pb2.EIO, f"storage error: {exc}") from exc


def _being_deleted(ledger_id: int) -> BookieError:
    return BookieError(bookie_pb2.EIO, f"ledger {ledger_id} is being deleted by garbage collection")


def _bad_add(op: AddOp) -> AddResult:
    """EBADREQ for an op :meth:`Bookie._validate` refused for its shape."""
    return malformed_add(op) or AddResult(
        bookie_pb2.EBADREQ, f"master key is {len(op.master_key)} bytes, expected {MASTER_KEY_SIZE}"
    )


def _never_journaled(durable: Awaitable[None]) -> None:
    """The ``skip-journal`` breakage (bookie.breakage): the journal submission, which starts only
    when awaited, is dropped unstarted."""
    if inspect.iscoroutine(durable):
        durable.close()
