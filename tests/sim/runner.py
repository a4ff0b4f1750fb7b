"""One simulated run: start the cluster, drive workload and nemesis for ``steps`` steps, heal every
fault, then run the final reads and the checkers.

A step is one workload action (an append burst, a create, a close, a recovery open, a tail, a
delete, a writer crash) or, with the swarm's fault probability, one fault (bookie crash, power loss
of several bookies, partition, one-way partition, slow link, connection reset, session expiry,
clock jump, fsync latency spike). Steps are a few virtual milliseconds apart; faults heal on
their own timers. Because a run with fewer steps is a prefix of one with more, the smallest
failing step count is found by bisection (:func:`shrink`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bkclient.ops import recovery as recovery_module
from bkproto.errors import BKError

from .checkers import Final, Violation, check
from .loop import SimLoop
from .network import LinkProfile
from .trace import Trace
from .workload import Admin, Process, Reader, Writer, garbage_collect, pick
from .world import Broken, SeedTree, Swarm, World
from .zk import ZK

LIVENESS_BOUND_S = 300.0  # after healing, everything must finish within this much virtual time
TIME_LIMIT_S = 24 * 3600.0  # a run whose virtual clock passes this is stuck in a loop
STEP_MEAN_S = 0.05
BUDGETS_SETTLE_S = 5.0  # after the last client stops, before the bookies' budgets are looked at
FORCE_AFTER_BURST = 0.1  # share of append bursts a writer follows with WriteHandle.force()


@dataclass
class RunResult:
    seed: int
    steps: int
    broken: str
    swarm: Swarm
    violations: list[Violation]
    trace_hash: str
    events: int
    sim_seconds: float
    wall_seconds: float
    trace: Trace = field(repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations


class Simulation:
    def __init__(self, seed: int, steps: int, broken: str = "") -> None:
        self.seed = seed
        self.steps = steps
        self.broken_name = broken
        self.seeds = SeedTree(seed)
        self.swarm = Swarm.draw(self.seeds.child("swarm"))
        self.broken = Broken.named(broken)
        self._forces = self.seeds.child("force")  # its own stream: the other draws stay as they were

    async def main(self) -> tuple[World, list[Violation]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        loop.set_time_limit(TIME_LIMIT_S)
        trace = Trace(clock=lambda: loop.now_us)
        world = World(self.seeds, loop, trace, self.swarm, self.broken)
        self.world = world
        trace.event(
            f"seed {self.seed} steps {self.steps} broken={self.broken_name or '-'} {self.swarm.describe()}"
        )
        with world.wall_clock():
            await world.setup()
            for bookie_id in world.bookies:
                await world.start_bookie(bookie_id)
            await self._run_steps(world)
            final = await self._final_phase(world)
        return world, check(trace.history, final)

    # -- steps ---------------------------------------------------------------------------------

    async def _run_steps(self, world: World) -> None:
        rng = self.seeds.child("workload")
        nemesis = self.seeds.child("nemesis")
        self.writers: list[Writer] = [Writer(world, f"w{i}") for i in range(rng.randint(1, 3))]
        self.readers: list[Reader] = [Reader(world, f"r{i}") for i in range(2)]
        self.admin = Admin(world, "admin")
        self.restarts = 0
        for writer in self.writers:
            writer.spawn(writer.create(), "create")
        for _ in range(self.steps):
            await asyncio.sleep(rng.expovariate(1 / STEP_MEAN_S))
            if nemesis.random() < self.swarm.fault_weight:
                self._fault(world, nemesis)
            else:
                self._action(world, rng)

    def _ledgers(self) -> list[int]:
        return sorted({lid for w in self.writers for lid in w.ledgers})

    def _action(self, world: World, rng: Any) -> None:
        writers = [w for w in self.writers if w.alive]
        readers = self.readers
        choice = rng.choices(
            ("append", "create", "close", "recover", "tail", "delete", "gc", "crash-writer", "crash-reader"),
            weights=(60, 4, 4, 5, 4, 1, 1, 1, 1),
        )[0]
        writer: Writer | None = pick(rng, writers)
        if choice == "append" and writer is not None:
            if writer.handle is None:
                writer.spawn(writer.create(), "create")
            else:
                writer.append_burst(rng.randint(1, 8))
                if self._forces.random() < FORCE_AFTER_BURST:
                    writer.spawn(writer.force(), "force")
                if self._armed_power_loss is not None:
                    victims, restart_after = self._armed_power_loss
                    self._armed_power_loss = None
                    strike = rng.uniform(0.0, 3 * self.swarm.fsync_ms / 1000.0 + 0.005)
                    world.loop.call_later(strike, self._power_loss, world, victims, restart_after)
        elif choice == "create" and writer is not None and writer.handle is None:
            writer.spawn(writer.create(), "create")
        elif choice == "close" and writer is not None and writer.handle is not None:
            writer.spawn(writer.close(), "close")
        elif choice in ("recover", "tail", "delete") and self._ledgers():
            reader: Reader = pick(rng, readers)
            ledger_id = pick(rng, self._ledgers())
            if choice == "recover":
                reader.spawn(reader.recover(ledger_id), "recover")
            elif choice == "tail" and rng.random() < 0.5:
                reader.spawn(reader.tail(ledger_id, rng.randint(1, 20)), "tail")
            elif choice == "tail":
                reader.spawn(reader.follow(ledger_id, rng.randint(0, 5), rng.uniform(0.5, 20.0)), "follow")
            else:
                reader.spawn(reader.delete(ledger_id), "delete")
        elif choice == "gc":
            self.readers[0].spawn(garbage_collect(world), "gc")
        elif choice == "crash-writer" and writer is not None:
            index = self.writers.index(writer)
            self.restarts += 1
            replacement = Writer(world, f"w{index}.{self.restarts}")
            replacement.ledgers = writer.ledgers  # its ledgers stay candidates for readers
            self.writers[index] = replacement
            world.loop.create_task(writer.crash())
        elif choice == "crash-reader":
            index = rng.randrange(len(self.readers))
            self.restarts += 1
            crashed = self.readers[index]
            self.readers[index] = Reader(world, f"r{index}.{self.restarts}")
            world.loop.create_task(crashed.crash())

    def _fault(self, world: World, rng: Any) -> None:
        loop = world.loop
        bookie_ids = sorted(world.bookies)
        nodes = set(bookie_ids) | {p.name for p in [*self.writers, *self.readers]} | {ZK}
        kind = rng.choices(
            (
                "crash",
                "power-loss",
                "partition",
                "one-way",
                "slow",
                "reset",
                "expire",
                "clock",
                "fsync-spike",
                "lose",
                "journal-error",
            ),
            weights=(6, 2, 3, 2, 2, 3, 2, 1, 2, 1, 1),
        )[0]
        if kind == "lose":
            if world.loss_allowed():
                bookie_id = rng.choice(bookie_ids)
                world.lose_bookie(bookie_id)
                self.admin.spawn(self.admin.rereplicate([bookie_id]), "rereplicate")
        elif kind == "crash":
            bookie_id = rng.choice(bookie_ids)
            world.crash_bookie(bookie_id, host_down=rng.random() < 0.3)
            loop.call_later(rng.uniform(0.1, 8.0), self._restart, world, bookie_id)
        elif kind == "power-loss":
            victims = rng.sample(bookie_ids, rng.randint(2, len(bookie_ids)))
            restart_after = rng.uniform(0.5, 5.0)
            if rng.random() < 0.5:
                self._power_loss(world, victims, restart_after)
            else:  # BUGGIFY-style: strike just after the next append burst, while writes are unsynced
                self._armed_power_loss = (victims, restart_after)
        elif kind in ("partition", "one-way"):
            isolated = set(rng.sample(sorted(nodes), rng.randint(1, max(1, len(nodes) // 2))))
            world.trace.event(f"nemesis: {kind} isolating {sorted(isolated)}")
            world.network.partition(isolated, nodes, one_way=kind == "one-way")
            loop.call_later(rng.uniform(0.5, 20.0), self._heal, world)
        elif kind == "slow":
            a, b = rng.sample(sorted(nodes), 2)
            factor = rng.choice((10.0, 100.0, 1000.0))
            world.trace.event(f"nemesis: slow link {a}<->{b} x{factor}")
            base = world.network.default
            for link in ((a, b), (b, a)):
                world.network.links[link] = LinkProfile(base.latency_ms, base.jitter_ms, factor)
            loop.call_later(rng.uniform(1.0, 20.0), self._unslow, world, a, b)
        elif kind == "reset":
            conns = sorted(world.network.connections)
            if conns:
                world.network.connections[rng.choice(conns)].reset("nemesis")
        elif kind == "expire":
            world.expire_bookie_session(rng.choice(bookie_ids))
        elif kind == "journal-error":
            # The journal's next write fails: the bookie refuses writes (EIO) until an operator
            # restarts it, which happens after a while, or in the final phase.
            victims = rng.sample(bookie_ids, rng.randint(1, len(bookie_ids)))
            world.trace.event(f"nemesis: journal disk errors armed on {victims}")
            for bookie_id in victims:
                world.bookies[bookie_id].disk.journal_error_armed = True
                loop.call_later(rng.uniform(1.0, 10.0), self._restart_if_failed, world, bookie_id)
        elif kind == "clock":
            jump = rng.uniform(-3600.0, 3600.0)
            world.clock_offset_s += jump
            world.trace.event(f"nemesis: wall clock jumps {jump:+.1f} s")
        else:
            disk = world.bookies[rng.choice(bookie_ids)].disk
            disk.faults.spike_probability = 0.5
            world.trace.event(f"nemesis: fsync spikes on {disk.name}")

            def calm() -> None:
                disk.faults.spike_probability = self.swarm.fsync_spike_probability

            loop.call_later(rng.uniform(1.0, 10.0), calm)

    def _power_loss(self, world: World, victims: list[str], restart_after: float) -> None:
        if self._healing:  # an armed strike due after the final phase began: faults are over
            return
        world.trace.event(f"nemesis: power loss of {victims}")
        for bookie_id in victims:
            world.crash_bookie(bookie_id, host_down=True)
        for bookie_id in victims:
            world.loop.call_later(restart_after, self._restart, world, bookie_id)

    _armed_power_loss: tuple[list[str], float] | None = None

    def _restart(self, world: World, bookie_id: str) -> None:
        if not world.bookies[bookie_id].up and not self._healing:
            world.loop.create_task(world.start_bookie(bookie_id))

    def _restart_if_failed(self, world: World, bookie_id: str) -> None:
        node = world.bookies[bookie_id]
        node.disk.journal_error_armed = False
        if node.up and node.disk.journal_failed and not self._healing:
            world.crash_bookie(bookie_id, host_down=False)
            world.loop.create_task(world.start_bookie(bookie_id))

    def _heal(self, world: World) -> None:
        world.trace.event("nemesis: partitions healed")
        world.network.heal()

    def _unslow(self, world: World, a: str, b: str) -> None:
        world.network.links.pop((a, b), None)
        world.network.links.pop((b, a), None)

    _healing = False

    # -- final phase ---------------------------------------------------------------------------

    async def _final_phase(self, world: World) -> Final:
        self._healing = True
        trace = world.trace
        trace.event("final: healing every fault")
        world.network.heal()
        world.network.links.clear()
        stuck: list[str] = []
        for bookie_id, node in sorted(world.bookies.items()):
            node.disk.faults.spike_probability = 0.0
            node.disk.journal_error_armed = False
            if node.up and node.disk.journal_failed:  # the operator restarts it
                world.crash_bookie(bookie_id, host_down=False)
            if not node.up:
                await world.start_bookie(bookie_id)
        try:
            await world.all_registered(LIVENESS_BOUND_S)
        except TimeoutError:
            stuck.append("bookie registration")
        rng = self.seeds.child("final")
        for writer in self.writers:
            if writer.alive and writer.handle is not None:
                if rng.random() < 0.5:
                    writer.spawn(writer.close(), "close")
                else:
                    await writer.crash()
        processes: list[Process] = [*self.writers, *self.readers, self.admin]
        tasks = sorted((t for p in processes for t in p.tasks), key=lambda t: getattr(t, "sim_id", 0))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=LIVENESS_BOUND_S)
            stuck += sorted(t.get_name() for t in pending)
        for process in processes:
            await process.crash() if process.tasks else await _quiet(process.stop())
        final = Final({}, {}, {}, set(), stuck)
        if world.lost:
            await self._final_rereplication(world, final)
        trace.event("final: reading every ledger")
        checker = Reader(world, "checker")
        final.deleted = {h.ledger for h in trace.history if h.f == "delete"}
        for ledger_id in self._ledgers():
            if ledger_id in final.deleted:
                continue
            try:
                await asyncio.wait_for(self._final_read(checker, ledger_id, final), LIVENESS_BOUND_S)
            except TimeoutError:
                stuck.append(f"final read of L{ledger_id}")
        await checker.stop()
        await asyncio.sleep(BUDGETS_SETTLE_S)  # the closes reach the bookies, their streams end
        final.budgets_held = world.budgets_held()
        final.journal_breaches = list(world.journal_breaches)
        for bookie_id, node in world.bookies.items():
            if node.disk.journal_files is not None:
                trace.event(f"journal of {bookie_id}: {node.disk.journal_files.describe()}")
        final.add_port_faults = {
            b: node.add_port_faults for b, node in world.bookies.items() if node.add_port_faults
        }
        return final

    async def _final_rereplication(self, world: World, final: Final) -> None:
        """Everything else healed: the lost bookies' sessions end, and their data is copied to
        live bookies until no ledger names them."""
        lost = sorted(world.lost)
        for bookie_id in lost:
            world.trace.event(f"zk: sessions of {bookie_id} expire (it is lost)")
            world.zk.expire_sessions_of(bookie_id)
        await asyncio.sleep(1.0)  # the watch events reach the clients
        admin = Admin(world, "admin-final")
        try:
            done = await asyncio.wait_for(admin.rereplicate(lost), LIVENESS_BOUND_S)
        except TimeoutError:
            final.stuck.append("final re-replication")
            return
        final.rereplicated = done
        manager = world.meta.ledger_manager
        for ledger_id in sorted(await manager.list_ledgers()):
            md = (await manager.read_ledger_metadata(ledger_id)).value
            if any(b in lost for segment in md.segments for b in segment.bookies):
                final.still_naming_lost.append(ledger_id)
        await admin.stop()

    async def _final_read(self, checker: Reader, ledger_id: int, final: Final) -> None:
        why = ""
        for _attempt in range(5):
            try:
                handle = await (await checker.client()).open_ledger(ledger_id, password=b"sim")
                last = handle.metadata.last_entry_id
                entries = {}
                if last >= 0:
                    async for entry in handle.read(0, last):
                        entries[entry.entry_id] = entry.data
                final.closed_last[ledger_id] = last
                final.final_reads[ledger_id] = entries
                final.unreadable.pop(ledger_id, None)
                return
            except BKError as exc:
                why = f"{type(exc).__name__}: {exc}"
                final.unreadable[ledger_id] = why
                await asyncio.sleep(5.0)


async def _quiet(coro: Any) -> None:
    with contextlib.suppress(BKError):
        await coro


@contextlib.contextmanager
def _broken_client(broken: Broken) -> Any:
    """The client-side broken variant that is a module-level rule (recovery's absence proof)."""
    real = getattr(recovery_module, "provably_absent")  # noqa: B009 - not re-exported, patched on purpose

    def one_answer_suffices(missing_answers: int, write_quorum: int, ack_quorum: int) -> bool:
        return missing_answers >= 1

    if broken.recover_without_coverage:
        setattr(recovery_module, "provably_absent", one_answer_suffices)  # noqa: B010
    try:
        yield
    finally:
        setattr(recovery_module, "provably_absent", real)  # noqa: B010


def run_seed(seed: int, steps: int, broken: str = "") -> RunResult:
    sim = Simulation(seed, steps, broken)
    started = time.perf_counter()
    if not os.environ.get("SIM_LOG"):
        logging.disable(logging.CRITICAL)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # finalizers at arbitrary points would make runs differ
    try:
        with _broken_client(sim.broken), asyncio.Runner(loop_factory=SimLoop) as runner:
            world, violations = runner.run(sim.main())
            sim_seconds = world.loop.time()
    finally:
        if gc_was_enabled:
            gc.enable()
        gc.collect()
        logging.disable(logging.NOTSET)
    trace = world.trace
    return RunResult(
        seed,
        steps,
        broken,
        sim.swarm,
        violations,
        trace.digest,
        trace.count,
        sim_seconds,
        time.perf_counter() - started,
        trace,
    )


def shrink(seed: int, steps: int, broken: str, fails: Callable[[RunResult], bool]) -> RunResult:
    """The run with the fewest steps (bisection over the step count) that still ``fails``."""
    best = run_seed(seed, steps, broken)
    low, high = 0, steps
    while high - low > 1:
        middle = (low + high) // 2
        result = run_seed(seed, middle, broken)
        if fails(result):
            best, high = result, middle
        else:
            low = middle
    return best
