"""Client processes of the simulation: writers, recovery openers, tailing readers and deleters.

Each process owns a real ``BookKeeper`` client and records what it does in the history
(``Trace.op``). A process may crash: its tasks are cancelled, its connections reset, and what it
had in flight is recorded as ``info`` (outcome unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

from bkclient.admin import BookKeeperAdmin
from bkclient.bookkeeper import BookKeeper
from bkclient.distribution import RoundRobinDistribution
from bkclient.write_handle import WriteHandle
from bkproto.errors import BKError

from .world import World

PASSWORD = b"sim"


class Process:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.rng = world.seeds.child(f"process/{name}")
        self._bk: BookKeeper | None = None
        self._connecting = asyncio.Lock()  # one client, however many tasks ask for it at once
        self.alive = True
        self.tasks: set[asyncio.Task[Any]] = set()

    async def client(self) -> BookKeeper:
        """This process's BookKeeper client, connected on first use (MetadataStoreError if
        ZooKeeper cannot be reached; the next call tries again)."""
        async with self._connecting:
            if self._bk is None:
                self._bk = await self.world.client(self.name)
        return self._bk

    def spawn(self, coro: Any, what: str) -> asyncio.Task[Any]:
        task = self.world.loop.create_task(coro, name=f"{self.name}-{what}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def op(self, kind: str, f: str, ledger: int = -1, entry: int = -1, value: Any = None) -> None:
        if self.alive or kind == "info":
            self.world.trace.op(self.name, kind, f, ledger, entry, value)

    async def crash(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self.world.trace.event(f"process {self.name} crashed")
        for task in sorted(self.tasks, key=lambda t: getattr(t, "sim_id", 0)):
            task.cancel()
        self.world.network.client_crashed(self.name)
        self.world.zk.process_died(self.name)
        self.on_crash()
        with contextlib.suppress(BKError):
            await self.close_handles()
            if self._bk is not None:
                await self._bk.close()  # stops its timers; nothing it sends can matter any more

    def on_crash(self) -> None:
        return None

    async def close_handles(self) -> None:
        return None

    async def stop(self) -> None:
        if self.alive:
            await self.close_handles()
            if self._bk is not None:
                await self._bk.close()
            self.alive = False


class Writer(Process):
    """Creates ledgers and appends pipelined bursts; closes, or crashes leaving them open."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.handle: WriteHandle | None = None
        self.handles: list[WriteHandle] = []  # every handle this process opened, in order
        self.ledgers: list[int] = []
        self._inflight: dict[tuple[int, int], bytes] = {}
        self._written = 0

    async def create(self) -> None:
        e, qw, qa = self.rng.choice(self.world.swarm.quorums)
        self.op("invoke", "create", value=(e, qw, qa))
        try:
            handle = await (await self.client()).create_ledger(e, qw, qa, password=PASSWORD)
        except BKError as exc:
            self.op("fail", "create", value=type(exc).__name__)
            return
        if self.world.broken.ack_qa_minus_1 and qa > 1:
            handle.distribution = RoundRobinDistribution(e, qw, qa - 1)
        self.handle = handle
        self.handles.append(handle)
        self.ledgers.append(handle.ledger_id)
        self.op("ok", "create", handle.ledger_id, value=(e, qw, qa))

    def append_burst(self, count: int) -> None:
        handle = self.handle
        if handle is None:
            return
        for _ in range(count):
            self._written += 1
            payload = (
                f"{self.name}/{handle.ledger_id}/{self._written}/{self.rng.getrandbits(32):08x}".encode()
            )
            try:
                future = handle.append_async(payload)
            except BKError as exc:
                self.op("fail", "add", handle.ledger_id, value=type(exc).__name__)
                return
            entry_id = handle.last_add_pushed
            self.op("invoke", "add", handle.ledger_id, entry_id, payload)
            self._inflight[(handle.ledger_id, entry_id)] = payload
            future.add_done_callback(self._add_done(handle.ledger_id, entry_id, payload))

    def _add_done(self, ledger_id: int, entry_id: int, payload: bytes) -> Any:
        def done(future: asyncio.Future[int]) -> None:
            self._inflight.pop((ledger_id, entry_id), None)
            error = None if future.cancelled() else future.exception()  # retrieved even after a crash
            if not self.alive:
                return
            if future.cancelled():
                self.op("info", "add", ledger_id, entry_id, payload)
            elif error is not None:
                self.op("fail", "add", ledger_id, entry_id, type(error).__name__)
            else:
                self.op("ok", "add", ledger_id, future.result(), payload)

        return done

    async def force(self) -> None:
        """``WriteHandle.force``: a ``ForceLedger`` to each bookie, a barrier in its journal."""
        handle = self.handle
        if handle is None:
            return
        self.op("invoke", "force", handle.ledger_id)
        try:
            lac = await handle.force()
        except BKError as exc:
            self.op("fail", "force", handle.ledger_id, value=type(exc).__name__)
            return
        self.op("ok", "force", handle.ledger_id, value=lac)

    async def close(self) -> None:
        handle = self.handle
        if handle is None:
            return
        self.handle = None
        self.op("invoke", "close", handle.ledger_id)
        try:
            await handle.close()
        except BKError as exc:
            self.op("fail", "close", handle.ledger_id, value=type(exc).__name__)
            return
        self.op("ok", "close", handle.ledger_id, value=handle.metadata.last_entry_id)

    async def close_handles(self) -> None:
        # BookKeeper.close aborts its handles in WeakSet order (memory addresses): abort them
        # here first, in creation order, so that runs do not depend on where objects live.
        for handle in self.handles:
            await handle.abort()

    def on_crash(self) -> None:
        for (ledger_id, entry_id), payload in sorted(self._inflight.items()):
            self.op("info", "add", ledger_id, entry_id, payload)
        self._inflight.clear()
        self.handle = None


class Reader(Process):
    """Recovery opens (fence + close) with full reads, and tailing with LAC long polls."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.tails = 0

    async def recover(self, ledger_id: int) -> None:
        self.op("invoke", "recover", ledger_id)
        try:
            handle = await (await self.client()).open_ledger(ledger_id, password=PASSWORD)
        except BKError as exc:
            self.op("fail", "recover", ledger_id, value=type(exc).__name__)
            return
        last = handle.metadata.last_entry_id
        self.op("ok", "recover", ledger_id, value=last)
        await self.read_all(ledger_id, handle, last)

    async def read_all(self, ledger_id: int, handle: Any, last: int) -> bool:
        if last < 0:
            return True
        self.op("invoke", "read", ledger_id, value=(0, last))
        got = 0
        try:
            async for entry in handle.read(0, last):
                self.op("ok", "read-entry", ledger_id, entry.entry_id, entry.data)
                got += 1
        except BKError as exc:
            self.op("fail", "read", ledger_id, value=(got, type(exc).__name__))
            return False
        self.op("ok", "read", ledger_id, value=(0, last))
        return True

    async def tail(self, ledger_id: int, polls: int) -> None:
        self.tails += 1
        tail_id = self.tails  # one process may tail a ledger several times at once
        self.op("invoke", "tail", ledger_id, value=tail_id)
        try:
            handle = await (await self.client()).open_ledger(ledger_id, password=PASSWORD, recovery=False)
            lac = -1
            for _ in range(polls):
                result = await handle.read_lac_long_poll(lac, 1.0)
                self.op("ok", "lac", ledger_id, value=(tail_id, result.last_add_confirmed))
                if result.entry is not None:
                    self.op("ok", "read-entry", ledger_id, result.entry.entry_id, result.entry.data)
                if result.last_add_confirmed > lac:
                    async for entry in handle.read(lac + 1, result.last_add_confirmed):
                        self.op("ok", "read-entry", ledger_id, entry.entry_id, entry.data)
                    lac = result.last_add_confirmed
                if handle.is_closed and lac >= handle.metadata.last_entry_id:
                    break
        except BKError as exc:
            self.op("fail", "tail", ledger_id, value=type(exc).__name__)
            return
        self.op("ok", "tail", ledger_id)

    async def follow(self, ledger_id: int, start: int, for_s: float) -> None:
        """``ReadHandle.tail``: entries in order as they become committed, for ``for_s`` seconds
        or until the ledger is closed and read to its end."""
        self.tails += 1
        tail_id = self.tails
        self.op("invoke", "follow", ledger_id, value=(tail_id, start))
        expected = start
        try:
            handle = await (await self.client()).open_ledger(ledger_id, password=PASSWORD, recovery=False)
            async with asyncio.timeout(for_s):
                async for entry in handle.tail(start):
                    self.op("ok", "read-entry", ledger_id, entry.entry_id, entry.data)
                    if entry.entry_id != expected:
                        self.op("ok", "follow-gap", ledger_id, entry.entry_id, (tail_id, expected))
                    expected = entry.entry_id + 1
        except TimeoutError:
            self.op("ok", "follow", ledger_id, value=(tail_id, expected - 1))
            return
        except BKError as exc:
            self.op("fail", "follow", ledger_id, value=type(exc).__name__)
            return
        self.op("ok", "follow", ledger_id, value=(tail_id, expected - 1))

    async def delete(self, ledger_id: int) -> None:
        self.op("invoke", "delete", ledger_id)
        try:
            await (await self.client()).delete_ledger(ledger_id)
        except BKError as exc:
            self.op("info", "delete", ledger_id, value=type(exc).__name__)
            return
        self.op("ok", "delete", ledger_id)


class Admin(Process):
    """Re-replicates the data of lost bookies (``pybk shell recover``'s BookKeeperAdmin)."""

    async def rereplicate(self, lost: list[str]) -> bool:
        self.op("invoke", "rereplicate", value=lost)
        try:
            reports = await BookKeeperAdmin(await self.client()).recover_bookies(lost)
        except BKError as exc:
            self.op("fail", "rereplicate", value=type(exc).__name__)
            return False
        failed = [(r.ledger_id, r.error) for r in reports if not r.ok]
        if failed:
            self.op("fail", "rereplicate", value=failed)
            return False
        self.op("ok", "rereplicate", value=[r.ledger_id for r in reports])
        return True


async def garbage_collect(world: World) -> None:
    """Each running bookie forgets ledgers whose metadata is gone (the bookie GC's decision,
    made here from ZooKeeper's state), racing writers that may still add to them. As the
    bookie's collector does, what is stored is listed before the metadata: a ledger created in
    between is then in the metadata listing."""
    stored = {b: await n.core.local_ledger_ids() for b, n in world.bookies.items() if n.core is not None}
    live = set(await world.meta.ledger_manager.list_ledgers())
    for bookie_id, ids in stored.items():
        core = world.bookies[bookie_id].core
        if core is None:
            continue
        doomed = sorted(ids - live)
        if doomed:
            world.trace.event(f"gc {bookie_id} deletes ledgers {doomed}")
            await core.delete_ledgers(doomed)


def pick(rng: random.Random, items: list[Any]) -> Any:
    return rng.choice(items) if items else None
