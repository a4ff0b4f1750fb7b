"""A simulated bookie disk and the ledger storage the real ``Bookie`` runs over in the simulation.

:class:`SimDisk` outlives bookie crashes. Journal writes stay *pending* until a (simulated) fsync
makes them durable; a crash keeps a random prefix of the pending writes (the OS may have written
them back) and may tear the next one, exactly as an unsynced journal file can end. On restart the
journal is replayed like ``DbLedgerStorage`` replays it: records up to the first invalid one.

:class:`SimLedgerStorage` is the subset of ``DbLedgerStorage`` that ``bookie.bookie.Bookie`` calls
(write cache, ledger index, one journal with group commit), kept in memory. It is the adapter until
the ``LedgerStorage`` seam of the storage branch lands; every entry stays in the write cache.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection
from dataclasses import dataclass, field

from bkproto.entry_format import HEADER
from bookie.storage.indexes import LedgerRecord
from bookie.storage.journal_format import LEDGER_ID, LEDGER_LAC, RecordType, scan_end, scan_records
from bookie.storage.write_cache import WriteCache

from .trace import Trace

_UNBOUNDED = 1 << 40


@dataclass
class DiskFaults:
    """Per-disk fault knobs, drawn from the seed."""

    fsync_ms: float = 1.0  # typical fsync latency
    spike_probability: float = 0.0  # chance that one fsync takes spike_ms instead
    spike_ms: float = 200.0
    tear_probability: float = 0.5  # chance that a crash tears the first lost write


@dataclass
class SimDisk:
    """Durable journal chunks (each one group commit's bytes, with a sequence number), the
    pending ones, and ledger deletions (by the chunk sequence they happened at)."""

    name: str
    rng: random.Random
    trace: Trace
    faults: DiskFaults = field(default_factory=DiskFaults)
    durable: list[tuple[int, bytes]] = field(default_factory=list)
    pending: list[tuple[int, bytes]] = field(default_factory=list)
    deleted_at: dict[int, int] = field(default_factory=dict)
    next_seq: int = 0
    # Broken variant "drop the unsynced-data-loss rule": writes count as acknowledged before fsync.
    ack_before_fsync: bool = False

    def write(self, data: bytes) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.pending.append((seq, data))
        return seq

    def sync(self, up_to_seq: int) -> None:
        """The pending writes up to ``up_to_seq`` become durable."""
        while self.pending and self.pending[0][0] <= up_to_seq:
            self.durable.append(self.pending.pop(0))

    def fsync_delay_s(self) -> float:
        if self.rng.random() < self.faults.spike_probability:
            return self.faults.spike_ms / 1000.0
        return self.rng.uniform(0.5, 1.5) * self.faults.fsync_ms / 1000.0

    def crash(self) -> None:
        """Power loss: a prefix of the pending writes survives, the next may be torn, the rest is lost."""
        kept = self.rng.randint(0, len(self.pending))
        self.durable.extend(self.pending[:kept])
        lost = self.pending[kept:]
        self.pending = []
        torn = ""
        if lost and len(lost[0][1]) > 1 and self.rng.random() < self.faults.tear_probability:
            seq, data = lost[0]
            cut = self.rng.randrange(1, len(data))
            self.durable.append((seq, data[:cut]))
            torn = f" tore write {seq} at byte {cut}/{len(data)}"
        self.trace.event(f"disk {self.name} crash: kept {kept} unsynced writes, lost {len(lost)}{torn}")

    def delete(self, ledger_ids: Collection[int]) -> None:
        for ledger_id in ledger_ids:
            self.deleted_at[ledger_id] = self.next_seq


class SimJournal:
    """Group commit: every submission waits for the next simulated fsync covering it."""

    def __init__(self, disk: SimDisk) -> None:
        self._disk = disk
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sync_loop(), name="sim-journal")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for _, future in self._waiting:
            future.cancel()
        self._waiting.clear()

    async def submit(self, parts: list[bytes], nbytes: int, count: int) -> None:
        seq = self._disk.write(b"".join(parts))
        self._wakeup.set()
        if self._disk.ack_before_fsync:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((seq, future))
        await future

    async def _sync_loop(self) -> None:
        disk = self._disk
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not disk.pending:
                continue
            up_to = disk.pending[-1][0]
            await asyncio.sleep(disk.fsync_delay_s())
            disk.sync(up_to)
            done = [f for seq, f in self._waiting if seq <= up_to]
            self._waiting = [(seq, f) for seq, f in self._waiting if seq > up_to]
            for future in done:
                if not future.done():
                    future.set_result(None)
            if disk.pending:
                self._wakeup.set()


class _LedgerIndex:
    def __init__(self) -> None:
        self.records: dict[int, LedgerRecord] = {}

    def get(self, ledger_id: int) -> LedgerRecord | None:
        record = self.records.get(ledger_id)
        return None if record is None else LedgerRecord(record.master_key, record.fenced, record.explicit_lac)

    def put(self, ledger_id: int, record: LedgerRecord) -> None:
        self.records[ledger_id] = LedgerRecord(record.master_key, record.fenced, record.explicit_lac)

    def delete(self, ledger_id: int) -> None:
        self.records.pop(ledger_id, None)


class _LedgerDir:
    """What ``Bookie`` reaches through ``storage.dir_for(ledger_id)``."""

    def __init__(self, storage: SimLedgerStorage) -> None:
        self.ledgers = _LedgerIndex()
        self._storage = storage

    def read_run(self, ledger_id: int, entry_id: int, count: int, max_bytes: int) -> list[tuple[int, bytes]]:
        body = self._storage.write_cache.get(ledger_id, entry_id)
        return [] if body is None else [(entry_id, body)]


class _Config:
    journal_dirs: list[str] = []


class SimLedgerStorage:
    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk
        self.config = _Config()
        self.write_cache = WriteCache(_UNBOUNDED)
        self._dir = _LedgerDir(self)
        self.journal = SimJournal(disk)
        self.journals = [self.journal]
        self.marks: list[object] = []
        self.replayed_records = 0

    async def start(self) -> None:
        self._replay()
        self.journal.start()

    def _replay(self) -> None:
        disk = self.disk
        valid: list[tuple[int, bytes]] = []
        for seq, data in disk.durable:
            end = 0
            for rtype, payload, after in scan_records(data, 0):
                self._apply(seq, rtype, payload)
                self.replayed_records += 1
                end = after
            if end < len(data):  # torn: like a new journal file after restart, nothing follows it
                self.disk.trace.event(
                    f"disk {disk.name} replay stops at write {seq}: {scan_end(data, end).name}"
                )
                valid.append((seq, data[:end]))
                break
            valid.append((seq, data))
        disk.durable = valid

    def _apply(self, seq: int, rtype: RecordType, payload: memoryview) -> None:
        if rtype is RecordType.ENTRY:
            body = bytes(payload)
            ledger_id, entry_id = HEADER.unpack_from(body)[:2]
            if seq >= self.disk.deleted_at.get(ledger_id, -1):
                self.write_cache.put(ledger_id, entry_id, body)
            return
        ledger_id = LEDGER_ID.unpack_from(payload)[0]
        if seq < self.disk.deleted_at.get(ledger_id, -1):
            return
        index = self._dir.ledgers
        record = index.get(ledger_id)
        if rtype is RecordType.MASTER_KEY:
            if record is None:
                index.put(ledger_id, LedgerRecord(bytes(payload[8:])))
            return
        if record is None:
            return
        if rtype is RecordType.FENCE:
            record.fenced = True
        else:
            record.explicit_lac = bytes(payload[LEDGER_LAC.size :])
        index.put(ledger_id, record)

    async def close(self) -> None:
        self.journal.stop()

    def abandon(self) -> None:
        self.journal.stop()

    def dir_for(self, ledger_id: int) -> _LedgerDir:
        return self._dir

    def journal_index(self, ledger_id: int) -> int:
        return 0

    def journal_for(self, ledger_id: int) -> SimJournal:
        return self.journal

    async def make_room(self, nbytes: int) -> None:
        return None

    def after_put(self) -> None:
        return None

    async def read(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.write_cache.get(ledger_id, entry_id)

    def last_entry(self, ledger_id: int) -> int:
        return self.write_cache.last_entry(ledger_id)

    async def entry_ids(self, ledger_id: int) -> list[int]:
        return sorted(self.write_cache.entry_ids(ledger_id))

    async def local_ledger_ids(self) -> set[int]:
        return set(self._dir.ledgers.records)

    async def delete_ledgers(self, ledger_ids: Collection[int]) -> None:
        for ledger_id in ledger_ids:
            self.write_cache.drop_ledger(ledger_id)
            self._dir.ledgers.delete(ledger_id)
        self.disk.delete(ledger_ids)
