"""Scripted runs of the simulation: the regression scenarios of bugs campaigns found.

Each scenario replays, step by step and on a fixed cluster, the fault sequence a failing seed
found, so it keeps failing (or passing, once fixed) whatever later changes to the workload do to
that seed's random choices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .loop import SimLoop
from .network import LinkProfile
from .trace import Trace
from .workload import PASSWORD, Reader, Writer
from .world import Broken, SeedTree, Swarm, World
from .zk import ZK

FIXED_SWARM = Swarm(
    bookies=4,
    quorums=((3, 2, 2),),
    fsync_ms=1.0,
    fsync_spike_probability=0.0,
    add_timeout_s=1.0,
    read_timeout_s=1.0,
    batch_interval_s=0.0,
    fault_weight=0.0,
    explicit_lac_interval_s=0.0,
    adds_per_loop_turn=4096,
)


def run_scenario(scenario: Callable[[World], Awaitable[None]], seed: int = 0) -> World:
    async def main() -> World:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        world = World(SeedTree(seed), loop, Trace(clock=lambda: loop.now_us), FIXED_SWARM, Broken())
        with world.wall_clock():
            await world.setup()
            for bookie_id in world.bookies:
                await world.start_bookie(bookie_id)
            await scenario(world)
        return world

    with asyncio.Runner(loop_factory=SimLoop) as runner:
        return runner.run(main())


async def recovery_dies_after_its_ensemble_change(world: World) -> tuple[int, int]:
    """Seed 69 (found at 56573c9): a recovery replaces a bookie it cannot reach, writes the new
    segment to the metadata, and dies before the replacement holds the entries of that segment.
    The next recovery reads those entries from the replacement, which says "no such entry", and
    closes the ledger before entries the writer saw acknowledged. Returns (last acknowledged
    entry, the entry the ledger was closed at)."""
    writer = Writer(world, "w0")
    await writer.create()
    handle = writer.handle
    assert handle is not None
    last_acked = -1
    for n in range(10):
        last_acked = await handle.append(f"entry {n}".encode())
    ledger_id = handle.ledger_id
    ensemble = list(handle.metadata.last_ensemble)
    spare = next(b for b in sorted(world.bookies) if b not in ensemble)
    # The last entry's second replica, and the spare, are out of the first recoverer's reach.
    second_replica = ensemble[handle.distribution.write_set(last_acked)[1]]
    await writer.crash()
    recoverer = Reader(world, "r0")
    world.network.partition({recoverer.name}, {recoverer.name, second_replica, spare})
    recoverer.spawn(recoverer.recover(ledger_id), "recover")
    # The re-add to the unreachable replica times out (add timeout 1 s), the spare replaces it,
    # and its re-add cannot arrive either: the recoverer dies then.
    await asyncio.sleep(FIXED_SWARM.add_timeout_s * 1.5)
    await recoverer.crash()
    world.network.heal()
    # The entry's first replica, which has it, answers the next recoverer after the replacement.
    first_replica = ensemble[handle.distribution.write_set(last_acked)[0]]
    base = world.network.default
    for link in (("checker", first_replica), (first_replica, "checker")):
        world.network.links[link] = LinkProfile(base.latency_ms, base.jitter_ms, slow_factor=100.0)
    checker = Reader(world, "checker")
    reopened = await (await checker.client()).open_ledger(ledger_id, password=PASSWORD)
    return last_acked, reopened.metadata.last_entry_id


async def reregistration_cut_off_from_zookeeper(world: World) -> tuple[bool, bool]:
    """Seed 2581 (found at a7a6703): a bookie's session expires while its link to ZooKeeper is
    slow, so its re-registration's create is still on the way when a partition cuts the bookie
    from ZooKeeper. The create fails with a connection loss, and the partition heals before the
    session times out: the session survives (RECONNECTED, no NEW_SESSION), without its
    ephemeral. Returns whether the session survived the partition (what the scenario needs) and
    whether the bookie is registered again once everything healed."""
    bookie = sorted(world.bookies)[0]
    slow = LinkProfile(latency_ms=1000.0, jitter_ms=0.0)  # an operation takes 2 s
    world.network.links[(bookie, ZK)] = world.network.links[(ZK, bookie)] = slow
    world.expire_bookie_session(bookie)  # its ephemeral goes; the re-registration begins
    await asyncio.sleep(0.5)  # its create is on the way
    session = world.registrations[bookie].zk
    renewed_id = session.session_id
    world.network.partition({bookie}, {bookie, ZK})
    await asyncio.sleep(3.0)  # the create arrives cut off; the session has not expired yet
    world.network.heal()
    world.network.links.clear()
    survived = session.connected and session.session_id == renewed_id
    try:
        await world.all_registered(timeout_s=300.0)
    except TimeoutError:
        return survived, False
    return survived, True
