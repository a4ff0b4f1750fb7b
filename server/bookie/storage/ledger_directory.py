"""One ledger directory: its entry logs and its two RocksDB indexes (``current/`` like BookKeeper).

Ledgers are spread over directories by ``ledgerId % len(dirs)``.

``lock`` serialises the two writers of a directory's entry logs and location index: the flush
thread and garbage collection. Under it a flush skips ledgers that garbage collection deleted
while their entries waited in the write cache, so a deleted ledger never comes back into the index.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from .entry_logger import EntryLogger
from .flush_pacer import FLUSH_SLICE_ENTRIES, INDEX_WORK_PER_BYTE, FlushPacer
from .indexes import EntryLocationIndex, LedgerIndex
from .kv import KeyValueStorage, RocksKeyValueStorage, RocksTuning
from .log_garbage import EntryLogGarbage
from .run_read import EntryRun, read_entry_run

CURRENT = "current"  # BookKeeper keeps a directory's files under current/
LEDGERS_INDEX = "ledgers"
LOCATIONS_INDEX = "locations"


class KvFactory(Protocol):
    def __call__(self, path: Path, *, create: bool = True) -> KeyValueStorage: ...


class DirectoryInUseError(OSError):
    """Another process (a running bookie) holds the index's RocksDB lock."""


class LostIndexError(OSError):
    """A directory's index is missing, emptied or damaged (an OSError: the daemon reports it as
    it reports other unusable directories, and stops)."""


def _require_index(path: Path) -> None:
    # RocksDB creates its directory and files even when it then refuses to open a missing index.
    if not (path / "CURRENT").is_file():
        raise LostIndexError(f"{path} holds no index (no CURRENT file)")


def rocks_kv(path: Path, *, create: bool = True, tuning: RocksTuning | None = None) -> KeyValueStorage:
    if not create:
        _require_index(path)
    return RocksKeyValueStorage(path, create=create, tuning=tuning)


def tuned_rocks_kv(tuning: RocksTuning) -> KvFactory:
    """``rocks_kv`` with the operator's RocksDB options."""

    def factory(path: Path, *, create: bool = True) -> KeyValueStorage:
        return rocks_kv(path, create=create, tuning=tuning)

    return factory


def read_only_kv(path: Path, *, create: bool = False) -> KeyValueStorage:
    """An existing index, read without its lock and without writing (inspection tools)."""
    _require_index(path)
    return RocksKeyValueStorage(path, create=False, read_only=True)


# RocksDB's status texts (rocksdict raises plain Exceptions): another holder of the LOCK file,
# and an index that is not there or not whole. Anything else (a full disk, EIO, EACCES) is the
# machine's trouble, not the index's, and is reported as it is.
_IN_USE = ("While lock file", "lock hold by current process")
_LOST = ("does not exist (create_if_missing is false)", "Corruption:", "No such file or directory")


def open_index(path: Path, kv_factory: KvFactory = rocks_kv, *, create: bool = True) -> KeyValueStorage:
    try:
        return kv_factory(path, create=create)
    except OSError:
        raise
    except Exception as exc:
        text = str(exc)
        if any(marker in text for marker in _IN_USE):
            raise DirectoryInUseError(f"{path} is in use by another process (a running bookie?)") from exc
        if any(marker in text for marker in _LOST):
            raise LostIndexError(f"cannot open {path}: {text}") from exc
        raise OSError(f"cannot open {path}: {text}") from exc


@contextlib.contextmanager
def index_locks(roots: Iterable[Path]) -> Iterator[None]:
    """Hold the RocksDB locks of the indexes under ``roots`` (fcntl locks on their LOCK files,
    as RocksDB takes them), so that no bookie starts on them meanwhile; DirectoryInUseError
    when one runs. For tools only: POSIX locks belong to the process, so this must not run in
    a process that has these indexes open itself (closing our descriptor would drop its lock)."""
    with contextlib.ExitStack() as held:
        for root in roots:
            for name in (LEDGERS_INDEX, LOCATIONS_INDEX):
                lock_file = root / CURRENT / name / "LOCK"
                if not lock_file.is_file():
                    continue
                f = held.enter_context(open(lock_file, "r+b"))
                try:
                    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    raise DirectoryInUseError(
                        f"{lock_file.parent} is in use by another process (a running bookie?)"
                    ) from exc
        yield


_REPAIR = {
    LOCATIONS_INDEX: "Rebuild it from the entry logs, with the bookie stopped:"
    " `pybk shell rebuild-db-ledger-locations-index` with this bookie's configuration.",
    LEDGERS_INDEX: "It holds the ledgers' master keys and fenced flags, which the entry logs do not:"
    " restore it, or rebuild it from the entry logs and journals with the bookie stopped"
    " (`pybk shell rebuild-db-ledgers-index` with this bookie's configuration: every ledger comes"
    " back fenced), or re-replicate this bookie's ledgers (`pybk shell recover <bookie id> -f`)"
    " and format it (`pybk shell bookieformat -d --bookieid <bookie id>`).",
}


class IndexWriteError(Exception):
    """A write to a directory's RocksDB index failed. RocksDB then refuses every later write
    ("Writer has previous error") until it is reopened, so flushes stop until a restart."""


class LedgerDirectory:
    def __init__(
        self,
        root: Path,
        entry_log_size_limit: int,
        kv_factory: KvFactory = rocks_kv,
        reserve_bytes: int = 0,
        page_cache_keep: int = -1,
    ) -> None:
        self.root = root
        current = root / CURRENT
        current.mkdir(parents=True, exist_ok=True)
        self.entry_logger = EntryLogger(current, entry_log_size_limit, reserve_bytes, page_cache_keep)
        # The first start creates both indexes before any entry log exists. Entry logs without
        # an index mean it was lost: RocksDB would create an empty one, and the bookie would
        # answer "no such entry" (or "no such ledger") for everything it holds. Refused instead.
        has_logs = bool(self.entry_logger.finished_log_ids())
        self._ledgers_kv = self._open_index(current / LEDGERS_INDEX, kv_factory, has_logs)
        try:
            self._locations_kv = self._open_index(current / LOCATIONS_INDEX, kv_factory, has_logs)
        except BaseException:
            self._ledgers_kv.close()
            raise
        self.ledgers = LedgerIndex(self._ledgers_kv)
        self.locations = EntryLocationIndex(self._locations_kv)
        self.lock = threading.Lock()
        self.closed = False  # set under ``lock`` by close(): garbage collection then stops
        self.garbage = EntryLogGarbage(self)

    def flush_ledgers(
        self,
        ledgers: list[tuple[int, dict[int, bytes]]],
        pacer: FlushPacer,
        done_work: float = 0.0,
        crcs: Mapping[int, Mapping[int, int]] | None = None,
    ) -> float:
        """Append each ledger's entries in id order, fsync the log, then index them and sync the
        index (the index never points at bytes that are not on disk). Both steps go slice by
        slice, ``pacer`` pausing between slices. ``done_work`` counts what this flush already
        did in other directories (see ``FlushPacer``); returns it plus what this one did.
        ``crcs``: ledger -> entry id -> the body's CRC32C where the caller has it already."""
        with self.lock:
            return self._flush_ledgers(ledgers, pacer, done_work, crcs or {})

    def _flush_ledgers(
        self,
        ledgers: list[tuple[int, dict[int, bytes]]],
        pacer: FlushPacer,
        done_work: float,
        crcs: Mapping[int, Mapping[int, int]],
    ) -> float:
        start = self.entry_logger.position()
        before = done_work
        try:
            keys, locations, done_work = self._append(ledgers, pacer, done_work, crcs)
            if keys:
                self.entry_logger.sync()
        except Exception:
            self.entry_logger.rewind(start)  # nothing points at those bytes yet
            raise
        # the appended bytes, spread evenly over the keys: the schedule's share of each slice
        per_key = (done_work - before) * INDEX_WORK_PER_BYTE / max(1, len(keys))
        try:
            for first in range(0, len(keys), FLUSH_SLICE_ENTRIES):
                began = time.perf_counter()
                end = min(first + FLUSH_SLICE_ENTRIES, len(keys))
                self.locations.add_batch(keys[first:end], locations[first:end])
                done_work += (end - first) * per_key
                if end < len(keys):
                    pacer.pause(began, done_work)
            self.locations.sync()
            self.ledgers.sync()
        except Exception as exc:
            raise IndexWriteError(f"index of {self.root}: {exc}") from exc
        return done_work

    def _append(
        self,
        ledgers: list[tuple[int, dict[int, bytes]]],
        pacer: FlushPacer,
        done_work: float,
        crcs: Mapping[int, Mapping[int, int]],
    ) -> tuple[list[bytes], list[bytes], float]:
        """Each ledger's entries into the entry log, slice by slice; their index keys and
        locations, and ``done_work`` plus the bytes written."""
        keys: list[bytes] = []
        locations: list[bytes] = []
        since_pause = 0
        began = time.perf_counter()
        for ledger_id, entries in ledgers:
            if self.ledgers.get(ledger_id) is None:
                continue  # deleted by garbage collection after these entries were cached
            ids = sorted(entries)
            known = crcs.get(ledger_id)
            for start in range(0, len(ids), FLUSH_SLICE_ENTRIES):
                chunk = ids[start : start + FLUSH_SLICE_ENTRIES]
                more_keys, more_locations = self.entry_logger.append(ledger_id, chunk, entries, known)
                keys += more_keys
                locations += more_locations
                done_work += sum(map(len, map(entries.__getitem__, chunk)))
                since_pause += len(chunk)
                if since_pause >= FLUSH_SLICE_ENTRIES:  # many small ledgers pause like one big one
                    pacer.pause(began, done_work)
                    since_pause = 0
                    began = time.perf_counter()
        return keys, locations, done_work

    # ---- garbage collection ------------------------------------------------------------------

    def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        """Drop the ledgers' records and entry locations, durably. Their bytes stay in the entry
        logs until :meth:`reclaim_entry_logs` finds a log holding nothing else."""
        with self.lock:
            if self.closed:
                return
            for ledger_id in ledger_ids:
                self.ledgers.delete(ledger_id)
                self.locations.delete_ledger(ledger_id)
            self.locations.sync()
            self.ledgers.sync()

    def read_run(self, ledger_id: int, first: int, max_entries: int, max_bytes: int) -> EntryRun:
        """``first`` and up to ``max_entries - 1`` following entries, one pread per contiguous
        stretch (:func:`run_read.read_entry_run`)."""
        try:
            return read_entry_run(self.locations, self.entry_logger, ledger_id, first, max_entries, max_bytes)
        except FileNotFoundError:
            # compaction deleted a log after its locations were looked up: the index names the
            # copies by now
            return read_entry_run(self.locations, self.entry_logger, ledger_id, first, max_entries, max_bytes)

    @staticmethod
    def _open_index(path: Path, kv_factory: KvFactory, has_logs: bool) -> KeyValueStorage:
        try:
            return open_index(path, kv_factory, create=not has_logs)
        except LostIndexError as exc:
            logs = f", while {path.parent} holds entry logs" if has_logs else ""
            raise LostIndexError(f"{exc}{logs}. {_REPAIR[path.name]}") from exc

    def close(self) -> None:
        with self.lock:  # after any flush or compaction slice; none starts after this
            self.closed = True
            self.entry_logger.close()
            self.close_indexes()

    def close_indexes(self) -> None:
        self._ledgers_kv.close()
        self._locations_kv.close()
