"""The cyclic garbage collector's young-generation threshold for pybk's processes.

Why: a writer keeps thousands of adds in flight (``PendingAddOp``, its future or callback, the
encoded request), each alive for a round trip. With CPython's default threshold (700 net
allocations of tracked objects) a young collection runs every few dozen adds, finds nearly every
young object still in flight, and moves it on to the older generations, whose collections then walk
all of them again: about a tenth of the client's CPU on the add path, for almost no garbage (the
add path's objects are freed by their reference counts; docs/cost-model.md has the profile and the
figures). With a threshold far above the allocations of one round trip, a young collection finds
the adds of a round trip already gone, and the older generations stop filling with them.

What it costs: cyclic garbage (rare here: asyncio's exception cycles) waits for more allocations
before it is freed, at most :data:`YOUNG_THRESHOLD` tracked objects' worth. The older generations'
thresholds are left as they are.

An application that embeds ``bkclient`` can do the same with ``gc.set_threshold``.
"""

from __future__ import annotations

import gc

# Net allocations of tracked objects between young collections (CPython's default: 700). A few
# round trips of adds at the client's outstanding limit, a few MiB of objects at most.
YOUNG_THRESHOLD = 20_000


def collect_young_garbage_less_often() -> None:
    """Raise the young generation's threshold to :data:`YOUNG_THRESHOLD` (never lower it: a
    process that set a higher one keeps it)."""
    young, middle, old = gc.get_threshold()
    if young and young < YOUNG_THRESHOLD:  # 0: the collector is off, leave it so
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
