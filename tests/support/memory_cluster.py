"""In-memory stand-ins for the client's collaborators, for unit tests of the read, recovery, tail
and replication paths: bookies that store, fence and long-poll like the real ones (a complete
:class:`bkclient.transport.BookieConnection` each), a CAS ledger store, a client context.

Failure knobs per bookie: ``down`` (every call fails like an unreachable bookie), ``gate`` (calls
wait until it is set: a slow bookie), ``corrupt`` (entries returned with a flipped payload byte),
``refused_adds`` (adds of these entries fail once their event is set, gate or not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from bkclient.add_stream import AddRequestEncoder
from bkclient.config import ClientConfig
from bkclient.digest import DigestManager
from bkclient.placement import BookieRacks, RandomPlacement
from bkclient.transport import AddListener, BookieConnection, DiskInfo, ReadResult, StrideResult, decode_add
from bkmeta.ledger_manager import LedgerWatcher
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkproto.errors import (
    BKError,
    BookieUnavailableError,
    ClientClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)

LEDGER = 7
PASSWORD = b"secret"


class MemoryBookie:
    """One bookie and the client's connection to it in one object. Calls wait for ``gate``, then
    fail while ``down``; after :meth:`close` they fail with ClientClosedError."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.closed = False
        self.entries: dict[int, dict[int, bytes]] = {}
        self.master_keys: dict[int, bytes] = {}
        self.fenced: set[int] = set()
        self.explicit_lac: dict[int, int] = {}
        self.down = False
        self.gate = asyncio.Event()
        self.gate.set()
        self.corrupt: set[tuple[int, int]] = set()
        self.refused_adds: dict[tuple[int, int], asyncio.Event] = {}
        self.reads: list[tuple[int, int]] = []
        self.batch_reads: list[tuple[int, int, int]] = []  # (ledger, first, max_count)
        self.batch_strides: list[int] = []  # the stride of each of batch_reads
        self.stride_polls: list[tuple[int, int, int]] = []  # requests: (ledger, first, stride)
        self.stride_answers = 0
        self.standing_polls = True  # False: answers a standing poll once, as an older bookie
        self.past_count = False  # True: a standing poll goes on answering past its count (a bug)
        self.standing: list[MemoryStandingPoll] = []  # every standing poll asked of it
        self.recovery_adds: list[tuple[int, int]] = []
        self.lacs: list[tuple[int, bytes]] = []  # explicit LACs written: (lac, body)
        self.forced: list[int] = []  # ledgers of force_ledger calls
        self.disk = DiskInfo(total_bytes=1 << 30, free_bytes=1 << 29)
        self.fence_reads = 0
        self._tasks: set[asyncio.Task[None]] = set()  # adds under way
        self._lac_changed = asyncio.Event()  # replaced after every set: waiters hold the old one

    # -- state helpers for tests ----------------------------------------------------------------

    def store(self, ledger_id: int, entry_id: int, body: bytes, master_key: bytes) -> None:
        self.master_keys.setdefault(ledger_id, master_key)
        self.entries.setdefault(ledger_id, {})[entry_id] = body

    def lac(self, ledger_id: int, digest: DigestManager) -> int:
        best = self.explicit_lac.get(ledger_id, -1)
        for body in self.entries.get(ledger_id, {}).values():
            best = max(best, digest.verify_header(body).last_add_confirmed)
        return best

    def _known_lac(self, ledger_id: int) -> int:
        from bkproto.entry_format import parse_header

        best = self.explicit_lac.get(ledger_id, -1)
        for body in self.entries.get(ledger_id, {}).values():
            best = max(best, parse_header(body).last_add_confirmed)
        return best

    async def _enter(self) -> None:
        await self.gate.wait()
        if self.closed:
            raise ClientClosedError(f"bookie client {self.bookie_id} is closed")
        if self.down:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: UNAVAILABLE")

    def _body(self, ledger_id: int, entry_id: int) -> bytes:
        ledger = self.entries.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(f"bookie {self.bookie_id}: ENOLEDGER")
        if entry_id == -1:
            if not ledger:
                raise NoSuchEntryError(f"bookie {self.bookie_id}: ENOENTRY")
            entry_id = max(ledger)
        body = ledger.get(entry_id)
        if body is None:
            raise NoSuchEntryError(f"bookie {self.bookie_id}: ENOENTRY {entry_id}")
        if (ledger_id, entry_id) in self.corrupt:
            body = body[:-1] + bytes([body[-1] ^ 0xFF])
        return body

    # -- BookieConnection ------------------------------------------------------------------------

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence_master_key: bytes | None = None,
        previous_lac: int | None = None,
        long_poll_timeout_ms: int = 0,
        piggyback: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - BookieConnection's signature
    ) -> ReadResult:
        await self._enter()
        self.reads.append((ledger_id, entry_id))
        if fence_master_key is not None:
            self.fence_reads += 1
            known = self.master_keys.get(ledger_id)
            if known is not None and known != fence_master_key:
                raise UnauthorizedAccessError(f"bookie {self.bookie_id}: EUA")
            self.master_keys[ledger_id] = fence_master_key
            self.fenced.add(ledger_id)
            self.entries.setdefault(ledger_id, {})
        if previous_lac is not None:
            try:
                async with asyncio.timeout(long_poll_timeout_ms / 1000.0):
                    while self._known_lac(ledger_id) <= previous_lac:
                        await self._lac_changed.wait()
            except TimeoutError:
                raise NoSuchEntryError(f"bookie {self.bookie_id}: ENOENTRY, LAC unchanged") from None
            if self.down:
                raise BookieUnavailableError(f"bookie {self.bookie_id}: UNAVAILABLE")
            # Like the real bookie: piggyback asks for -1 = the entry after previous_lac; a timeout
            # or a missing entry is ENOENTRY.
            assert not piggyback or entry_id == -1
            return ReadResult(self._body(ledger_id, previous_lac + 1), self._known_lac(ledger_id))
        body = self._body(ledger_id, entry_id)
        return ReadResult(body, self._known_lac(ledger_id))

    async def read_entries(
        self,
        ledger_id: int,
        first: int,
        max_count: int,
        max_bytes: int,
        *,
        stride: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[bytes]:
        await self._enter()
        self.batch_reads.append((ledger_id, first, max_count))
        self.batch_strides.append(stride)
        out = [self._body(ledger_id, first)]
        size = len(out[0])
        entry_id = first + stride
        ledger = self.entries[ledger_id]
        while len(out) < max_count and entry_id in ledger:
            body = self._body(ledger_id, entry_id)
            if size + len(body) > max_bytes:
                break
            out.append(body)
            size += len(body)
            entry_id += stride
        return out

    def standing_stride_poll(
        self,
        ledger_id: int,
        first: int,
        stride: int,
        max_count: int,
        max_bytes: int,
        long_poll_timeout_ms: int,
    ) -> MemoryStandingPoll:
        self.stride_polls.append((ledger_id, first, stride))
        poll = MemoryStandingPoll(self, ledger_id, first, stride, max_count, max_bytes, long_poll_timeout_ms)
        self.standing.append(poll)
        return poll

    async def stride_answer(
        self,
        ledger_id: int,
        first: int,
        stride: int,
        max_count: int,
        max_bytes: int,
        long_poll_timeout_ms: int,
    ) -> StrideResult:
        """One answer of a stride poll, as the bookie serves it."""
        await self._enter()
        self.stride_answers += 1
        try:
            async with asyncio.timeout(long_poll_timeout_ms / 1000.0):
                while self._known_lac(ledger_id) < first:
                    await self._lac_changed.wait()
        except TimeoutError:
            return StrideResult([], self._known_lac(ledger_id))
        if self.down:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: UNAVAILABLE")
        lac = self._known_lac(ledger_id)
        bodies: list[bytes] = []
        size = 0
        entry_id = first
        while entry_id <= lac and len(bodies) < max_count:
            try:
                body = self._body(ledger_id, entry_id)
            except (NoSuchEntryError, NoSuchLedgerError):
                break  # like the real bookie: the answer stops at the first entry not held
            if bodies and size + len(body) > max_bytes:
                break
            bodies.append(body)
            size += len(body)
            entry_id += stride
        return StrideResult(bodies, lac)

    async def _store_add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool
    ) -> None:
        refusal = self.refused_adds.get((ledger_id, entry_id))
        if refusal is not None:
            await refusal.wait()
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add of {entry_id} refused")
        await self._enter()
        known = self.master_keys.get(ledger_id)
        if known is not None and known != master_key:
            raise UnauthorizedAccessError(f"bookie {self.bookie_id}: EUA")
        if ledger_id in self.fenced and not recovery:
            raise LedgerFencedError(f"bookie {self.bookie_id}: EFENCED")
        if recovery:
            self.recovery_adds.append((ledger_id, entry_id))
        self.store(ledger_id, entry_id, body, master_key)
        self.notify_lac()

    def _spawn_add(self, run: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(run)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False
    ) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                await self._store_add(ledger_id, entry_id, master_key, body, recovery)
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(None)

        task = self._spawn_add(run())
        # A caller that gave up (timed out) cancels the future: the add is abandoned with it.
        future.add_done_callback(lambda _: task.cancel() if not task.done() else None)
        return future

    def add_bodies(
        self,
        packer: AddRequestEncoder,
        bodies: Sequence[bytes],
        listener: AddListener,
        entry_ids: Sequence[int],
    ) -> None:
        for body, entry_id in zip(bodies, entry_ids, strict=True):
            self.add_encoded(packer.encode(entry_id, body), listener, entry_id)

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        add = decode_add(encoded)

        async def run() -> None:
            try:
                await self._store_add(add.ledger_id, add.entry_id, add.master_key, add.body, add.recovery)
            except BKError as exc:
                listener.add_complete(self.bookie_id, token, exc)
            else:
                listener.add_complete(self.bookie_id, token, None)

        self._spawn_add(run())

    async def write_lac(
        self,
        ledger_id: int,
        lac: int,
        master_key: bytes,
        body: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - BookieConnection's signature
    ) -> None:
        await self._enter()
        self.lacs.append((lac, body))
        self.explicit_lac[ledger_id] = max(lac, self.explicit_lac.get(ledger_id, -1))
        self.notify_lac()

    async def force_ledger(self, ledger_id: int, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._enter()
        self.forced.append(ledger_id)

    async def get_bookie_info(self, *, timeout: float | None = None) -> DiskInfo:  # noqa: ASYNC109
        await self._enter()
        return self.disk

    async def list_entries(self, ledger_id: int, *, timeout: float | None = None) -> list[tuple[int, int]]:  # noqa: ASYNC109
        await self._enter()
        if ledger_id not in self.entries:
            raise NoSuchLedgerError(f"bookie {self.bookie_id}: no ledger {ledger_id}")
        runs: list[tuple[int, int]] = []
        for entry_id in sorted(self.entries[ledger_id]):
            if runs and runs[-1][1] == entry_id - 1:
                runs[-1] = (runs[-1][0], entry_id)
            else:
                runs.append((entry_id, entry_id))
        return runs

    async def close(self) -> None:
        self.closed = True
        self.gate.set()  # calls waiting at the gate fail now, like a closed client's
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def notify_lac(self) -> None:
        self._lac_changed.set()
        self._lac_changed = asyncio.Event()


class MemoryStandingPoll:
    """A standing stride poll as a bookie serves it (``MemoryBookie.stride_answer`` again and
    again), its answers queued for ``next``."""

    def __init__(
        self, bookie: MemoryBookie, ledger_id: int, first: int, stride: int, max_count: int,
        max_bytes: int, timeout_ms: int,
    ) -> None:
        self._answers: asyncio.Queue[StrideResult | BaseException] = asyncio.Queue()
        self.max_count = max_count
        self.taken = 0  # entries its answers brought to the reader
        self._task = asyncio.ensure_future(
            self._serve(bookie, ledger_id, first, stride, max_count, max_bytes, timeout_ms)
        )

    async def _serve(
        self, bookie: MemoryBookie, ledger_id: int, first: int, stride: int, remaining: int,
        max_bytes: int, timeout_ms: int,
    ) -> None:
        while True:
            try:
                answer = await bookie.stride_answer(
                    ledger_id, first, stride, remaining, max_bytes, timeout_ms
                )
            except BKError as exc:
                self._answers.put_nowait(exc)
                return
            remaining -= len(answer.bodies)
            more = bookie.standing_polls and bool(answer.bodies) and (remaining > 0 or bookie.past_count)
            remaining = max(remaining, 1)  # a bookie answering past the count asks for one at a time
            self._answers.put_nowait(answer._replace(more=more))
            if not more:
                return
            first += len(answer.bodies) * stride

    async def next(self) -> StrideResult:
        answer = await self._answers.get()
        if isinstance(answer, BaseException):
            raise answer
        self.taken += len(answer.bodies)
        return answer

    @property
    def parked(self) -> bool:
        """Still serving: more answers may come."""
        return not self._task.done()

    def cancel(self) -> None:
        self._task.cancel()


# Checked by mypy (tests.support is type-checked): a memory bookie is a whole BookieConnection.
_MEMORY_BOOKIE_IS_A_CONNECTION: type[BookieConnection] = MemoryBookie


class MemoryLedgerStore:
    """CAS store for ledger metadata with a write log and watches (called on every write)."""

    def __init__(self) -> None:
        self.ledgers: dict[int, Versioned[LedgerMetadata]] = {}
        self.writes: list[LedgerMetadata] = []
        self.watchers: dict[int, list[LedgerWatcher]] = {}

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        await asyncio.sleep(0)
        try:
            return self.ledgers[ledger_id]
        except KeyError:
            raise NoSuchLedgerError(f"ledger {ledger_id}") from None

    async def write_ledger_metadata(
        self, ledger_id: int, md: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        await asyncio.sleep(0)
        current = self.ledgers[ledger_id]
        if current.version != expected_version:
            raise MetadataVersionError(f"ledger {ledger_id}: version {expected_version} != {current.version}")
        new = Versioned(md, expected_version + 1)
        self.ledgers[ledger_id] = new
        self.writes.append(md)
        for callback in list(self.watchers.get(ledger_id, [])):
            asyncio.get_running_loop().call_soon(callback, new)
        return new

    def watch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        self.watchers.setdefault(ledger_id, []).append(callback)

    def unwatch_ledger(self, ledger_id: int, callback: LedgerWatcher) -> None:
        self.watchers[ledger_id].remove(callback)


@dataclass
class FakeContext:
    bookies: dict[str, MemoryBookie]
    config: ClientConfig = field(default_factory=ClientConfig)
    ledger_manager: MemoryLedgerStore = field(default_factory=MemoryLedgerStore)
    placement: RandomPlacement = field(default_factory=RandomPlacement)

    def bookie(self, bookie_id: str) -> MemoryBookie:
        return self.bookies[bookie_id]

    def writable_bookie_racks(self) -> BookieRacks:
        return {b: None for b, bookie in self.bookies.items() if not bookie.down}


def make_cluster(n: int, **config: float) -> FakeContext:
    bookies = {f"127.0.0.1:{3181 + i}": MemoryBookie(f"127.0.0.1:{3181 + i}") for i in range(n)}
    return FakeContext(bookies, ClientConfig(**config))  # type: ignore[arg-type]


def make_metadata(
    ensemble: list[str],
    write_quorum: int,
    ack_quorum: int,
    *,
    state: LedgerState = LedgerState.OPEN,
    last_entry_id: int = -1,
    length: int = 0,
    segments: tuple[Segment, ...] | None = None,
    digest_type: DigestType = DigestType.CRC32C,
) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum_size=write_quorum,
        ack_quorum_size=ack_quorum,
        state=state,
        last_entry_id=last_entry_id,
        length=length,
        digest_type=digest_type,
        password=PASSWORD,
        ctime=0,
        segments=segments or (Segment(0, tuple(ensemble)),),
    )


def payload(entry_id: int) -> bytes:
    return f"entry-{entry_id:06d}".encode() * 3


class Writer:
    """Writes entries the way a WriteHandle does (round-robin, LAC piggybacked), straight into
    the memory bookies, so readers have something realistic to read."""

    def __init__(self, ctx: FakeContext, metadata: LedgerMetadata, ledger_id: int = LEDGER) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.ledger_id = ledger_id
        self.digest = DigestManager(ledger_id, PASSWORD, metadata.digest_type)
        self.length = 0
        self.lac = -1
        self.next_id = 0

    def body(self, entry_id: int) -> bytes:
        data = payload(entry_id)
        return self.digest.encode_entry(entry_id, self.lac, self.length + len(data), data)

    def write(
        self, count: int, *, skip: set[str] | frozenset[str] = frozenset(), confirm: bool = True
    ) -> None:
        """Store ``count`` entries on their write sets (minus ``skip``); confirm = advance LAC."""
        from bkclient.ops.read import write_set_bookies

        for _ in range(count):
            entry_id = self.next_id
            data = payload(entry_id)
            body = self.digest.encode_entry(entry_id, self.lac, self.length + len(data), data)
            for bookie_id in write_set_bookies(self.metadata, entry_id):
                if bookie_id not in skip:
                    self.ctx.bookies[bookie_id].store(self.ledger_id, entry_id, body, self.digest.master_key)
            self.length += len(data)
            self.next_id += 1
            if confirm:
                self.lac = entry_id

    async def notify(self) -> None:
        for bookie in self.ctx.bookies.values():
            bookie.notify_lac()
