"""Processing of one batch of adds, shared by the AddEntries stream and the unary AddEntry.

Each add is checked on its own for what only the handler knows (a master key present, the
configured size limit); the rest reach :meth:`BookieCore.add_entries` in one call, which checks the
ids, the header and read-only once for all, and every add gets its own status back in request
order. A bad add never fails its neighbours.

This is the bookie's hottest Python code (once per entry at 100k+ entries/s), so it avoids
per-entry allocations beyond the AddOp and the response entry, and records latency once per batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter, itemgetter

from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, AddResult, BookieCore, malformed_add
from bookie.handlers.add_answer import append_all_ok
from bookie.handlers.add_message import MessageAdds, add_ids, request_ops
from bookie.handlers.common import HandlerLimits, elapsed_ms, failure_of
from bookie.stats import RequestStats

log = logging.getLogger(__name__)

EOK = bookie_pb2.EOK
EBADREQ = bookie_pb2.EBADREQ
EUA = bookie_pb2.EUA
EREADONLY = bookie_pb2.EREADONLY
RECOVERY_ADD = bookie_pb2.RECOVERY_ADD
_LEDGER_ID = itemgetter(0)  # AddOp.ledger_id, read in C
_ENTRY_ID = itemgetter(1)
_MASTER_KEY = itemgetter(2)
_BODY = itemgetter(3)
_STATUS = attrgetter("status")  # AddResult.status
# Failed adds of one batch whose answer carries a message; the rest carry their status only.
_DETAILED_FAILURES = 16


class AddBatchProcessor:
    def __init__(self, core: BookieCore, stats: RequestStats, limits: HandlerLimits) -> None:
        self._core = core
        self._stat = stats.add_entry_request
        self._max_entry_bytes = limits.max_entry_bytes
        self._slice = limits.adds_per_loop_turn

    def check(self, add: bookie_pb2.AddRequest, read_only: bool) -> tuple[int, str] | None:
        """Why ``add`` cannot be accepted, or ``None`` if it is well formed: the full answer, in
        the order of precedence clients see (negative ids, then a missing key, then the body)."""
        op = AddOp(add.ledger_id, add.entry_id, add.master_key, add.body, add.flags & RECOVERY_ADD != 0)
        return self._refusal(op, read_only)

    def _refusal(self, op: AddOp, read_only: bool) -> tuple[int, str] | None:
        """:meth:`check` of an add already built as an op (whichever form it came in)."""
        if op.ledger_id >= 0 and op.entry_id >= 0:
            if not op.master_key:
                return EUA, f"add of entry {op.entry_id} of ledger {op.ledger_id} without a master key"
            size = len(op.body)
            if size > self._max_entry_bytes:
                return EBADREQ, (
                    f"entry {op.entry_id} of ledger {op.ledger_id}: body of {size} bytes exceeds the"
                    f" {self._max_entry_bytes}-byte limit"
                )
        refusal = malformed_add(op)
        if refusal is not None:
            return refusal.status, refusal.message
        if read_only and not op.recovery:
            return EREADONLY, "the bookie is read-only; only recovery adds are accepted"
        return None

    async def process(
        self, adds: Sequence[bookie_pb2.AddRequest], count_ok: bool = False
    ) -> bookie_pb2.AddEntriesResponse:
        """One response entry per add, same order; with ``count_ok`` (the request's flag) the
        leading slices whose adds all succeeded are answered as ``ok_count`` instead, and one
        entry per add after them. Never raises (except on cancellation).

        The CPU-bound steps (checking adds, building the answer) are synchronous, and a batch of
        more than ``adds_per_loop_turn`` adds runs them one slice of that many per event-loop
        turn: one huge message yields to every other client's adds between slices."""
        start = time.perf_counter()
        response = bookie_pb2.AddEntriesResponse()
        if not adds:
            return response
        read_only = self._core.read_only
        if len(adds) <= self._slice:
            ops, rejected = self._validate(adds, read_only)
            # The core stages the adds before its first wait, in this same loop turn.
            outcomes = await self._add(ops) if ops else []
            ok = self._answer(response, adds, ops, rejected, outcomes, _DETAILED_FAILURES, count_ok)
        else:
            ok = await self._process_in_slices(response, adds, read_only, count_ok)
        latency = elapsed_ms(start)
        self._stat.observe(latency, True, ok)
        self._stat.observe(latency, False, len(adds) - ok)
        return response

    async def _process_in_slices(
        self,
        response: bookie_pb2.AddEntriesResponse,
        adds: Sequence[bookie_pb2.AddRequest],
        read_only: bool,
        count_ok: bool,
    ) -> int:
        # Each slice goes to the core as soon as it is checked, in order, so the journal sees the
        # adds in request order; the answers are built slice by slice once all are durable.
        slices: list[
            tuple[
                Sequence[bookie_pb2.AddRequest],
                list[AddOp],
                dict[int, tuple[int, str]],
                asyncio.Future[list[AddResult]] | None,
            ]
        ] = []
        for low in range(0, len(adds), self._slice):
            chunk = adds[low : low + self._slice]
            ops, rejected = self._validate(chunk, read_only)
            slices.append((chunk, ops, rejected, asyncio.ensure_future(self._add(ops)) if ops else None))
            await asyncio.sleep(0)  # other clients' adds run between slices
        ok = 0
        detailed = _DETAILED_FAILURES
        for chunk, ops, rejected, staged in slices:
            outcomes = await staged if staged is not None else []
            chunk_ok = self._answer(response, chunk, ops, rejected, outcomes, detailed, count_ok)
            ok += chunk_ok
            detailed = max(0, detailed - (len(chunk) - chunk_ok))
            await asyncio.sleep(0)
        return ok

    def _validate(
        self, adds: Sequence[bookie_pb2.AddRequest], read_only: bool
    ) -> tuple[list[AddOp], dict[int, tuple[int, str]]]:
        """The well-formed adds as core ops, and index in ``adds`` -> why each other one is refused.

        Only the checks the core does not make: a master key present at all, the configured size
        limit, and a packed group's shape (:mod:`bookie.handlers.add_message`); the ids, the
        header and read-only are the core's, BookieCore.add_entries. One pass builds every op
        (per ``AddRequest``, or per packed group in C) and two C-level passes check them; a batch
        with a refusal in it is filtered in a second, slower pass, where each refusal is explained."""
        if isinstance(adds, MessageAdds):
            ops, refused = adds.ops()
        else:
            ops, refused = request_ops(adds), {}
        max_entry_bytes = self._max_entry_bytes
        if (
            not refused
            and all(map(_MASTER_KEY, ops))
            and max(map(len, map(_BODY, ops)), default=0) <= max_entry_bytes
        ):
            return ops, {}
        accepted: list[AddOp] = []
        rejected: dict[int, tuple[int, str]] = {}
        well_formed = iter(ops)
        for index in range(len(ops) + len(refused)):
            if index in refused:
                rejected[index] = refused[index]
                continue
            op = next(well_formed)
            if op.master_key and len(op.body) <= max_entry_bytes:
                accepted.append(op)
            else:
                rejected[index] = self._refusal(op, read_only) or (EBADREQ, "invalid add")
        return accepted, rejected

    @staticmethod
    def _answer(
        response: bookie_pb2.AddEntriesResponse,
        adds: Sequence[bookie_pb2.AddRequest],
        ops: list[AddOp],
        rejected: dict[int, tuple[int, str]],
        outcomes: list[AddResult],
        detailed: int,
        count_ok: bool,
    ) -> int:
        """Answer the adds of one slice in ``response``; returns how many are EOK. With
        ``count_ok``, a slice whose adds all succeeded, while no result is in the answer yet
        (a success counted after a result would be answered out of order), only adds to its
        ``ok_count``; any other gets one result per add. Only the first ``detailed`` failures
        carry their message (the status says what went wrong; a message per add of a huge
        refused batch would make the answer many times the request's size)."""
        results = response.results
        ok = 0
        if not rejected:
            if count_ok and not results and not any(map(_STATUS, outcomes)):  # EOK is 0
                response.ok_count += len(ops)
                return len(ops)
            if _all_ok_in_a_row(response, ops, outcomes):
                return len(ops)
            for op, outcome in zip(ops, outcomes, strict=True):
                status = outcome.status
                if status == EOK:
                    ok += 1
                    results.add(ledger_id=op.ledger_id, entry_id=op.entry_id)
                else:
                    message = outcome.message if detailed > 0 else ""
                    detailed -= 1
                    results.add(status=status, ledger_id=op.ledger_id, entry_id=op.entry_id, message=message)
            return ok
        accepted = iter(outcomes)
        for index, (ledger_id, entry_id) in enumerate(add_ids(adds)):
            status, message = rejected.get(index) or _unpack(next(accepted))
            if status == EOK:
                ok += 1
            else:
                message = message if detailed > 0 else ""
                detailed -= 1
            results.add(status=status, ledger_id=ledger_id, entry_id=entry_id, message=message)
        return ok

    async def _add(self, ops: list[AddOp]) -> list[AddResult]:
        try:
            outcomes = await self._core.add_entries(ops)
        except Exception as exc:  # noqa: BLE001 - the gRPC boundary: a core failure fails this batch only
            status, message = failure_of(exc, f"add of {len(ops)} entries")
            return [AddResult(status, message)] * len(ops)
        if len(outcomes) != len(ops):
            log.error("core returned %d results for %d adds", len(outcomes), len(ops))
            return [AddResult(bookie_pb2.EIO, "bookie returned a wrong number of add results")] * len(ops)
        return outcomes


def _all_ok_in_a_row(
    response: bookie_pb2.AddEntriesResponse, ops: list[AddOp], outcomes: list[AddResult]
) -> bool:
    """Answer the usual batch, all EOK and each ledger's entries in ascending order (entries of
    one ledger, or a packed group per ledger), per run of one ledger (:func:`append_all_ok`);
    False, having answered nothing, for any other."""
    if not ops or any(map(_STATUS, outcomes)):  # EOK is 0
        return False
    ledger_id = ops[0][0]
    entry_ids = list(map(_ENTRY_ID, ops))
    ledger_ids = list(map(_LEDGER_ID, ops))
    if ledger_ids.count(ledger_id) == len(ops):
        if entry_ids != sorted(entry_ids):
            return False
        append_all_ok(response, ledger_id, entry_ids)
        return True
    runs: list[tuple[int, list[int]]] = []
    start = 0
    for run_ledger, run in groupby(ledger_ids):
        end = start + sum(1 for _ in run)
        run_ids = entry_ids[start:end]
        if run_ids != sorted(run_ids):
            return False
        runs.append((run_ledger, run_ids))
        start = end
    for run_ledger, run_ids in runs:
        append_all_ok(response, run_ledger, run_ids)
    return True


def _unpack(result: AddResult) -> tuple[int, str]:
    return result.status, result.message
