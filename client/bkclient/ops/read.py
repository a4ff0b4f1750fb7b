"""Reading entries: one entry with speculative reads, or a range with many reads in flight.

Every body is verified with the ledger's digest before it is handed out; a replica that fails,
times out or returns a body whose digest does not match is skipped in favour of the next replica of
the entry's write set. A replica that is merely slow gets company: after the speculative read timeout
the next replica is asked too, and the first verified answer wins (BookKeeper's speculative reads).

Ranges are read in order but with several requests in flight, in ReadEntries calls of many entries
each (a gRPC call costs hundreds of microseconds on each side, an entry a few):

- When the ensemble equals the write quorum every bookie holds every entry of the segment, so the
  range is cut into chunks of consecutive entries, spread over the replicas.
- When it does not (striping, E > Qw), entries whose ids are equal modulo E share a write set, so
  a block of consecutive entries is read as E strided chunks (ids ``first + r``, ``first + r + E``,
  ...; the bookies' ReadEntries ``stride``), each from one of its residue's replicas, and the
  answers are interleaved back into entry order. BookKeeper reads such ledgers an entry per call.

Memory stays bounded: at most ``_CHUNKS_IN_FLIGHT`` chunks, blocks of about as many chunks in
all (:func:`_blocks_in_flight`) or ``_READS_IN_FLIGHT`` single entries wait. A chunk holds at
most ``read_batch_max_entries`` entries, striped or not, and stops once it
holds ``read_batch_max_bytes`` (after one ReadEntries answer, which the bookie caps at that many
bytes): the range then reads the rest of its block before going on. So with entries of a MiB, a
range read holds a few ReadEntries answers, not thousands of entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from bkclient.config import ClientConfig
from bkclient.digest import DigestManager
from bkclient.entry import LedgerEntry, ledger_entries
from bkclient.transport import BookieConnection
from bkmeta.model import LedgerMetadata
from bkproto.errors import (
    BKError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_READS_IN_FLIGHT = 32  # single-entry reads in flight per range read
# ReadEntries calls in flight per range read: about one per replica, each of up to
# ClientConfig.read_batch_max_entries entries / read_batch_max_bytes bytes. Large chunks keep the
# per-call gRPC cost (hundreds of microseconds on each side) small per entry: on 3 local bookies,
# 1000-entry chunks read 1 KiB entries about 1.5x faster than 100-entry chunks.
_CHUNKS_IN_FLIGHT = 3
# Strided chunks in flight per striped range read, over all its bookies: three per bookie at E3.
# The number kept when strided chunks grew to an unstriped chunk's size (docs/performance.md).
_STRIDED_CHUNKS_IN_FLIGHT = 9


# Blocks of a range read that ask for less than a full request (halving back from the first).
_RAMP_BLOCKS = 3


def _blocks_in_flight(stride: int) -> int:
    """Blocks of E strided chunks in flight: about ``_STRIDED_CHUNKS_IN_FLIGHT`` chunks (three
    blocks at E3), at least one block for wide ensembles."""
    return max(1, -(-_STRIDED_CHUNKS_IN_FLIGHT // stride))



class ReadContext(Protocol):
    """What the read operations need from the client (``bkclient.context.ClientContext``)."""

    @property
    def config(self) -> ClientConfig: ...

    def bookie(self, bookie_id: str) -> BookieConnection: ...


def is_absent(error: BaseException) -> bool:
    """The replica answered definitely that it does not have the entry (or the ledger)."""
    return isinstance(error, NoSuchEntryError | NoSuchLedgerError)


def pick_failure(ledger_id: int, entry_id: int, errors: Sequence[BKError]) -> BKError:
    """The error to raise when no replica could serve an entry: NoSuchEntry only if every replica
    said so, a digest mismatch if one was seen (corruption must not look like an outage), else
    the first failure."""
    if errors and all(is_absent(e) for e in errors):
        return NoSuchEntryError(f"ledger {ledger_id} entry {entry_id}: no replica has it")
    detail = "; ".join(str(e) for e in errors) or "no replica to ask"
    for error in errors:
        if isinstance(error, DigestMismatchError):
            return DigestMismatchError(f"ledger {ledger_id} entry {entry_id}: {detail}")
    for error in errors:
        if not is_absent(error):
            return type(error)(f"ledger {ledger_id} entry {entry_id}: {detail}")
    return ReadError(f"ledger {ledger_id} entry {entry_id}: {detail}")


def write_set_bookies(metadata: LedgerMetadata, entry_id: int) -> tuple[str, ...]:
    """The bookies that store ``entry_id``, in write-set order (round-robin striping)."""
    ensemble = metadata.ensemble_for(entry_id)
    e = len(ensemble)
    return tuple(ensemble[(entry_id + w) % e] for w in range(metadata.write_quorum_size))


def segment_end(metadata: LedgerMetadata, entry_id: int) -> int | None:
    """Last entry id of the segment holding ``entry_id`` (None: the last segment, open-ended)."""
    for segment in metadata.segments:
        if segment.first_entry_id > entry_id:
            return segment.first_entry_id - 1
    return None


@dataclass(frozen=True, slots=True)
class EntryRead:
    """A verified entry plus what its replica told us about the LAC."""

    entry: LedgerEntry
    last_add_confirmed: int  # max of the piggybacked LAC in the header and the bookie's known LAC
    body: bytes  # as stored (header, digest, payload): re-replication copies it byte for byte


class ReadEntryOp:
    """Read one entry from its write set: first replica, the next after an error or a digest
    mismatch at once, or after the speculative timeout in parallel. First verified answer wins."""

    def __init__(
        self,
        ctx: ReadContext,
        digest: DigestManager,
        ledger_id: int,
        entry_id: int,
        replicas: Sequence[str],
    ) -> None:
        self._ctx = ctx
        self._digest = digest
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._replicas = replicas
        self.errors: list[BKError] = []

    async def _attempt(self, bookie_id: str) -> EntryRead:
        timeout = self._ctx.config.read_entry_timeout_s
        result = await self._ctx.bookie(bookie_id).read_entry(
            self._ledger_id, self._entry_id, timeout=timeout
        )
        try:
            verified = self._digest.verify_entry(self._entry_id, result.body)
        except DigestMismatchError as exc:
            log.warning("bookie %s returned a corrupt copy: %s", bookie_id, exc)
            raise DigestMismatchError(f"bookie {bookie_id}: {exc}") from exc
        entry = LedgerEntry(self._ledger_id, self._entry_id, verified.payload)
        return EntryRead(entry, max(verified.last_add_confirmed, result.max_lac), result.body)

    async def run(self) -> EntryRead:
        replicas = self._replicas
        speculative = self._ctx.config.speculative_read_timeout_s
        attempts = race_replicas(lambda i: self._attempt(replicas[i]), 0, len(replicas), speculative)
        async with contextlib.aclosing(attempts):
            async for _, outcome in attempts:
                if not isinstance(outcome, BKError):
                    return outcome
                self.errors.append(outcome)
        raise pick_failure(self._ledger_id, self._entry_id, self.errors)


@dataclass(frozen=True, slots=True)
class Served:
    """What one read request of a range produced: its first entries in order, and the error that
    stopped it short (None: all of them). The range yields the entries before raising."""

    entries: list[LedgerEntry]
    error: BKError | None = None
    # stopped at the byte limit with no error: the rest of the request is still to be read
    short: bool = False


class ReadChunkOp:
    """Read ``count`` entries ``first``, ``first + stride``, ... from bookies that each hold all of
    them (stride 1 when E == Qw; E for one residue of a striped segment), with ReadEntries calls.
    Starts at replica ``first_replica``; a short answer (byte limit) continues on the same replica,
    a failure or a corrupt body moves to the next replica from the first entry not yet served, and
    a replica silent past the speculative read timeout gets the next one asked too (first answer
    wins). Entries no replica serves in bulk go through :class:`ReadEntryOp` so the caller gets
    that entry's precise error."""

    def __init__(
        self,
        ctx: ReadContext,
        digest: DigestManager,
        ledger_id: int,
        first: int,
        count: int,
        replicas: Sequence[str],
        first_replica: int,
        stride: int = 1,
    ) -> None:
        self._ctx = ctx
        self._digest = digest
        self._ledger_id = ledger_id
        self._first = first
        self._count = count
        self._stride = stride
        self._replicas = tuple(replicas[first_replica:]) + tuple(replicas[:first_replica])

    async def run(self) -> Served:
        out: list[LedgerEntry] = []
        stride = self._stride
        replica = 0
        max_bytes = self._ctx.config.read_batch_max_bytes
        held = 0
        while len(out) < self._count and replica < len(self._replicas):
            if held >= max_bytes:
                return Served(out, short=True)
            entries, replica = await self._read_from(self._first + len(out) * stride, replica)
            out += entries
            held += sum(len(entry.data) for entry in entries)
        while len(out) < self._count:  # per entry, with every replica and speculative reads
            entry_id = self._first + len(out) * stride
            try:
                read = await ReadEntryOp(
                    self._ctx, self._digest, self._ledger_id, entry_id, self._replicas
                ).run()
            except BKError as exc:
                return Served(out, exc)
            out.append(read.entry)
        return Served(out)

    async def _read_from(self, first_id: int, replica: int) -> tuple[list[LedgerEntry], int]:
        """Entries from ``first_id`` in one ReadEntries call to replica ``replica``, or to the
        next ones: after a failure, or alongside it once the speculative timeout passes without an
        answer. Returns the first verified entries served and the replica to continue with (the
        one that served them, unless its answer was cut short by a corrupt body); nothing once
        every replica failed."""
        replicas = self._replicas
        speculative = self._ctx.config.speculative_read_timeout_s
        attempts = race_replicas(
            lambda i: self._fetch(replicas[i], first_id), replica, len(replicas), speculative
        )
        async with contextlib.aclosing(attempts):
            async for served_by, outcome in attempts:
                if isinstance(outcome, BKError):
                    log.debug("batched read of ledger %d from %d on %s failed: %s",
                              self._ledger_id, first_id, replicas[served_by], outcome)
                    continue
                entries, clean = outcome
                if entries:
                    return entries, served_by if clean else served_by + 1
        return [], len(replicas)

    async def _fetch(self, bookie_id: str, first_id: int) -> tuple[list[LedgerEntry], bool]:
        """One ReadEntries call: the verified entries and whether every body returned verified
        (a corrupt one ends the list there)."""
        config = self._ctx.config
        ledger_id = self._ledger_id
        stride = self._stride
        wanted = self._count - (first_id - self._first) // stride
        bodies = await self._ctx.bookie(bookie_id).read_entries(
            ledger_id,
            first_id,
            min(wanted, config.read_batch_max_entries),
            config.read_batch_max_bytes,
            stride=stride,
            timeout=config.read_entry_timeout_s,
        )
        payloads, corrupt = self._digest.verify_entries(first_id, stride, bodies[:wanted])
        # a bookie may hold entries past the range's end: those were not asked for
        entries = ledger_entries(ledger_id, first_id, stride, payloads)
        if corrupt is not None:
            log.warning("bookie %s returned a corrupt copy: %s", bookie_id, corrupt)
            return entries, False
        return entries, True


class ReadRangeOp:
    """Entries ``first .. last`` (inclusive) in order, with bounded reads in flight.

    ``batched`` allows ReadEntries calls (chunks, or strided blocks for a striped segment); without
    it every entry is read on its own."""

    def __init__(
        self,
        ctx: ReadContext,
        digest: DigestManager,
        metadata: LedgerMetadata,
        ledger_id: int,
        first: int,
        last: int,
        batched: bool = True,
    ) -> None:
        self._ctx = ctx
        self._digest = digest
        self._metadata = metadata
        self._ledger_id = ledger_id
        self._first = first
        self._last = last
        self._batched = batched
        self._block_counter = 0

    async def entries(self) -> AsyncGenerator[LedgerEntry, None]:
        """The entries; stops at the first entry that cannot be read, raising its error."""
        async for batch in self.batches():
            for entry in batch:
                yield entry

    async def batches(self) -> AsyncGenerator[list[LedgerEntry], None]:
        """The entries as each request served them: lists of consecutive entries, in order, of
        at most ``read_batch_max_entries`` each (a striped block's E chunks come interleaved into
        one list of up to E times that). For a consumer that takes entries in bulk (a Spark task
        building Arrow batches), one step per list instead of one per entry."""
        # each request with the ids it covers, so one cut short can be picked up where it stopped
        inflight: deque[tuple[asyncio.Task[Served], int, int]] = deque()
        next_id = self._first
        try:
            while True:
                while next_id <= self._last and len(inflight) < self._window():
                    first_id = next_id
                    next_id, request = self._request_for(first_id, self._last)
                    inflight.append((asyncio.ensure_future(request), first_id, next_id - 1))
                if not inflight:
                    return
                task, first_id, last_id = inflight.popleft()
                served = await task
                if served.entries:
                    yield served.entries
                if served.error is not None:
                    raise served.error
                if served.short:  # the rest of this request comes before the next in flight
                    resume = first_id + len(served.entries)
                    end, request = self._request_for(resume, last_id)
                    inflight.appendleft((asyncio.ensure_future(request), resume, end - 1))
        finally:
            discard_tasks(task for task, _, _ in inflight)

    def _window(self) -> int:
        if not self._batched:
            return _READS_IN_FLIGHT
        ensemble_size = self._metadata.ensemble_size  # the same in every segment
        striped = self._metadata.write_quorum_size != ensemble_size
        return _blocks_in_flight(ensemble_size) if striped else _CHUNKS_IN_FLIGHT

    def _request_for(self, entry_id: int, up_to: int) -> tuple[int, Coroutine[Any, Any, Served]]:
        """The next request starting at ``entry_id`` (reading no further than ``up_to``) and
        the id just after it."""
        md = self._metadata
        if not self._batched:
            single = ReadEntryOp(
                self._ctx, self._digest, self._ledger_id, entry_id, write_set_bookies(md, entry_id)
            )
            return entry_id + 1, _single(single)
        end = segment_end(md, entry_id)
        last = up_to if end is None else min(end, up_to)
        ensemble_size = len(md.ensemble_for(entry_id))
        # A block: one chunk, or E strided ones, of at most read_batch_max_entries entries each.
        # A strided chunk as large as an unstriped one: a bookie's cost per ReadEntries call (the
        # gRPC call, the run lookup) is paid per chunk, and E smaller chunks paid it E times.
        stride = 1 if md.write_quorum_size == ensemble_size else ensemble_size
        # The first blocks are smaller (an eighth, a quarter, a half): the first entries come back
        # sooner (the first of a striped block waits for all its chunks), and the reader has
        # entries to check while the full-size requests behind them are served.
        ramp = max(0, _RAMP_BLOCKS - self._block_counter)
        per_chunk = max(1, self._ctx.config.read_batch_max_entries >> ramp)
        count = min(last - entry_id + 1, per_chunk * stride)
        # Residue r of block b starts at position (b + r) mod Qw of its write set: the blocks
        # rotate over the replicas, so every bookie serves some (a counter running over all
        # chunks, E per block, left half of the bookies idle when E is a multiple of Qw), and
        # neighbouring residues, which a bookie holds together, tend to go to the same bookie.
        block = self._block_counter
        self._block_counter += 1
        chunks = [
            ReadChunkOp(
                self._ctx,
                self._digest,
                self._ledger_id,
                entry_id + r,
                (count - r + stride - 1) // stride,
                write_set_bookies(md, entry_id + r),
                (block + r) % md.write_quorum_size,
                stride,
            )
            for r in range(min(stride, count))
        ]
        if len(chunks) == 1:
            return entry_id + count, chunks[0].run()
        return entry_id + count, _interleaved(chunks)


async def _interleaved(chunks: Sequence[ReadChunkOp]) -> Served:
    """Run the strided chunks of one block together (chunk ``r`` holds entries ``r``, ``r + E``,
    ... of the block) and put their entries back in entry order, up to the first one missing."""
    tasks = [asyncio.ensure_future(chunk.run()) for chunk in chunks]
    try:
        results = [await task for task in tasks]
    finally:
        discard_tasks(tasks)
    # Fewer chunks than E only when the block is shorter than E: each then holds one entry, and
    # taking them in turn is still entry order.
    stride = len(results)
    # Taken in turn, the entries stop at the first position whose chunk has run out: chunk r's
    # k-th entry is position k * stride + r, and chunk r runs out at position len * stride + r
    # (where it reached the end of the block, or stopped at its error or the byte limit).
    end = min(len(served.entries) * stride + r for r, served in enumerate(results))
    out: list[LedgerEntry] = [cast(LedgerEntry, None)] * end
    for r, served in enumerate(results):
        out[r:end:stride] = served.entries[: len(range(r, end, stride))]
    stopped = results[end % stride]
    return Served(out, stopped.error, stopped.short)


async def race_replicas(
    attempt: Callable[[int], Coroutine[Any, Any, T]], first: int, count: int, speculative_s: float
) -> AsyncGenerator[tuple[int, T | BKError], None]:
    """BookKeeper's speculative reads over replicas ``first .. count - 1``: ``attempt(first)``,
    then the next replica whenever ``speculative_s`` passes with no answer (0: never) or an answer
    was not taken (a failure, or one the caller skips). Yields ``(replica, result or BKError)`` as
    answers come; the caller stops iterating when one will do (close the generator: the attempts
    still running are cancelled). Other exceptions propagate."""
    pending: dict[asyncio.Task[T], int] = {}
    following = first

    def launch() -> None:
        nonlocal following
        pending[asyncio.ensure_future(attempt(following))] = following
        following += 1

    if following < count:
        launch()
    try:
        while pending:
            more = following < count
            done, _ = await asyncio.wait(
                pending,
                timeout=speculative_s if more and speculative_s > 0 else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:  # the replicas asked so far are slow: ask one more
                launch()
                continue
            for task in done:
                replica = pending.pop(task)
                error = task.exception()
                if error is None:
                    yield replica, task.result()
                elif isinstance(error, BKError):
                    yield replica, error
                else:
                    raise error
            if following < count:  # no answer was taken: move on at once
                launch()
    finally:
        discard_tasks(pending)


def discard_tasks(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel tasks nobody will await; collect the outcome of finished ones so asyncio does not
    report "exception was never retrieved"."""
    for task in tasks:
        if task.done():
            _collect(task)
        else:
            # A cancelled task can still end with its own error, if its answer raced the
            # cancellation: collect that outcome too once it ends.
            task.cancel()
            task.add_done_callback(_collect)


def _collect(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _single(op: ReadEntryOp) -> Served:
    try:
        return Served([(await op.run()).entry])
    except BKError as exc:
        return Served([], exc)
