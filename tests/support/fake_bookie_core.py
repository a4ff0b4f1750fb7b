"""An in-memory BookieCore for handler and service unit tests (no storage, no durability).

It follows the rules the real core owns (master key, fencing, LAC from headers and WriteLac,
long-poll wake-ups) closely enough to exercise every handler path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bkproto.entry_format import HEADER, LAC_HEADER
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, AddResult, DiskInfo, JournalMark, LacInfo, LogMark, malformed_add
from bookie.errors import BookieError, no_entry, no_ledger


@dataclass
class FakeLedger:
    master_key: bytes
    fenced: bool = False
    lac: int = -1
    lac_ts: int = 0
    explicit_lac_body: bytes | None = None
    entries: dict[int, bytes] = field(default_factory=dict)


class FakeBookieCore:
    def __init__(self) -> None:
        self.ledgers: dict[int, FakeLedger] = {}
        self.read_only = False
        self.add_calls: list[int] = []  # batch sizes seen by add_entries
        self.add_gate: asyncio.Event | None = None  # when set, adds wait for it (pipelining tests)
        self.fail_adds_with: Exception | None = None
        self._lac_changed = asyncio.Condition()
        self._add_called = asyncio.Condition()

    async def wait_for_add_calls(self, n: int) -> None:
        """Until ``add_entries`` has been entered ``n`` times."""
        async with self._add_called:
            await self._add_called.wait_for(lambda: len(self.add_calls) >= n)

    def _ledger(self, ledger_id: int) -> FakeLedger:
        ledger = self.ledgers.get(ledger_id)
        if ledger is None:
            raise no_ledger(ledger_id)
        return ledger

    async def add_entries(self, ops: Sequence[AddOp]) -> list[AddResult]:
        self.add_calls.append(len(ops))
        async with self._add_called:
            self._add_called.notify_all()
        if self.add_gate is not None:
            await self.add_gate.wait()
        if self.fail_adds_with is not None:
            raise self.fail_adds_with
        results = []
        for op in ops:
            refusal = malformed_add(op)  # the contract's checks, which the handlers leave to the core
            if refusal is not None:
                results.append(refusal)
                continue
            if self.read_only and not op.recovery:
                results.append(AddResult(bookie_pb2.EREADONLY, "read-only"))
                continue
            ledger = self.ledgers.setdefault(op.ledger_id, FakeLedger(op.master_key))
            if ledger.master_key != op.master_key:
                results.append(AddResult(bookie_pb2.EUA, "wrong master key"))
                continue
            if ledger.fenced and not op.recovery:
                results.append(AddResult(bookie_pb2.EFENCED, "fenced"))
                continue
            ledger.entries[op.entry_id] = op.body
            await self._advance_lac(ledger, HEADER.unpack_from(op.body)[2])
            results.append(AddResult(bookie_pb2.EOK))
        return results

    async def _advance_lac(self, ledger: FakeLedger, lac: int) -> None:
        if lac > ledger.lac:
            ledger.lac = lac
            ledger.lac_ts = int(time.time() * 1000)
            async with self._lac_changed:
                self._lac_changed.notify_all()

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        ledger = self._ledger(ledger_id)
        if entry_id == -1:
            if not ledger.entries:
                raise no_entry(ledger_id, entry_id)
            entry_id = max(ledger.entries)
        body = ledger.entries.get(entry_id)
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
        ledger = self._ledger(ledger_id)
        out: list[bytes] = []
        size = 0
        entry_id = first_entry_id
        while (
            len(out) < max_count
            and entry_id in ledger.entries
            and (last_entry_id is None or entry_id <= last_entry_id)
        ):
            body = ledger.entries[entry_id]
            if out and size + len(body) > max_bytes:
                break
            out.append(body)
            size += len(body)
            entry_id += stride
        if not out:
            raise no_entry(ledger_id, first_entry_id)
        return out

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        ledger = self.ledgers.setdefault(ledger_id, FakeLedger(master_key))
        if ledger.master_key != master_key:
            raise BookieError(bookie_pb2.EUA, "wrong master key")
        ledger.fenced = True

    def last_add_confirmed(self, ledger_id: int) -> int:
        ledger = self.ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.lac

    def lac_update_timestamp(self, ledger_id: int) -> int:
        ledger = self.ledgers.get(ledger_id)
        return 0 if ledger is None else ledger.lac_ts

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        async with self._lac_changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._lac_changed.wait_for(lambda: self.last_add_confirmed(ledger_id) > previous_lac),
                    timeout_s,
                )
        return self.last_add_confirmed(ledger_id)

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> None:
        ledger = self.ledgers.setdefault(ledger_id, FakeLedger(master_key))
        if ledger.master_key != master_key:
            raise BookieError(bookie_pb2.EUA, "wrong master key")
        ledger.explicit_lac_body = body
        await self._advance_lac(ledger, LAC_HEADER.unpack_from(body)[1])

    async def read_lac(self, ledger_id: int) -> LacInfo:
        ledger = self._ledger(ledger_id)
        last = ledger.entries[max(ledger.entries)] if ledger.entries else None
        return LacInfo(ledger.explicit_lac_body, last)

    async def force_ledger(self, ledger_id: int) -> None:
        self._ledger(ledger_id)

    def disk_info(self) -> DiskInfo:
        return DiskInfo(total_bytes=1000, free_bytes=400)

    async def list_entries(self, ledger_id: int) -> list[tuple[int, int]]:
        ids = sorted(self._ledger(ledger_id).entries)
        runs: list[tuple[int, int]] = []
        for entry_id in ids:
            if runs and runs[-1][1] == entry_id - 1:
                runs[-1] = (runs[-1][0], entry_id)
            else:
                runs.append((entry_id, entry_id))
        return runs

    def last_log_marks(self) -> list[JournalMark]:
        return [JournalMark(Path("journal"), LogMark(0, 0))]
