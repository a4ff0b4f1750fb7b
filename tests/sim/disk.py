"""A simulated bookie disk: the storage branch's ``MemoryLedgerStorage`` over a ``MemoryDisk``,
with fsync latency, latency spikes and power loss drawn from the seed.

The ``MemoryDisk`` outlives bookie crashes. Its journal is durable only up to the last completed
sync; a sync takes the time :meth:`SimDisk.fsync_delay_s` draws. A crash keeps a random prefix of
the unsynced journal (the OS may have written some back), possibly ending in a torn record that
replay's CRC check drops. The broken variant ``ack_before_fsync`` acknowledges writes before
their sync.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from bookie.api import AddOp
from bookie.storage.api import LedgerUpdate
from bookie.storage.memory import MemoryDisk, MemoryLedgerStorage

from .trace import Trace


@dataclass
class DiskFaults:
    """Per-disk fault knobs, drawn from the seed."""

    fsync_ms: float = 1.0  # typical fsync latency
    spike_probability: float = 0.0  # chance that one fsync takes spike_ms instead
    spike_ms: float = 200.0


@dataclass
class SimDisk:
    name: str
    rng: random.Random
    trace: Trace
    faults: DiskFaults = field(default_factory=DiskFaults)
    memory: MemoryDisk = field(default_factory=MemoryDisk)
    # Broken variant "drop the unsynced-data-loss rule": writes count as acknowledged before fsync.
    ack_before_fsync: bool = False
    storage: MemoryLedgerStorage | None = None

    def fsync_delay_s(self) -> float:
        if self.rng.random() < self.faults.spike_probability:
            return self.faults.spike_ms / 1000.0
        return self.rng.uniform(0.5, 1.5) * self.faults.fsync_ms / 1000.0

    async def _sync(self, nbytes: int) -> None:
        await asyncio.sleep(self.fsync_delay_s())

    def open(self) -> MemoryLedgerStorage:
        """A storage for a new bookie process over this disk."""
        kind = _AckBeforeFsync if self.ack_before_fsync else MemoryLedgerStorage
        self.storage = kind(self.memory, sync=self._sync)
        return self.storage

    def crash(self) -> None:
        """Power loss: the unsynced journal is lost, but for a random prefix that may end torn."""
        memory = self.memory
        unsynced = memory.written - memory.synced
        if self.storage is not None:
            self.storage.crash(self.rng)
        kept = memory.written - memory.synced
        self.trace.event(f"disk {self.name} crash: kept {kept} of {unsynced} unsynced journal bytes")


class _AckBeforeFsync(MemoryLedgerStorage):
    """Acknowledges a write at once; its sync still happens (or not) behind the bookie's back."""

    def write(
        self, updates: Sequence[LedgerUpdate], entries: Sequence[AddOp], *, keep_loop_free: bool = False
    ) -> Awaitable[None]:
        synced = asyncio.ensure_future(super().write(updates, entries))
        synced.add_done_callback(lambda f: f.cancelled() or f.exception())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
