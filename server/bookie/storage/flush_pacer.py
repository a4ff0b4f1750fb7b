"""Pacing of a write-cache flush: spread over a time budget rather than done in one burst.

A flush appends a whole half (32 MiB by default) to an entry log, slice by slice on a worker
thread, and sleeps between slices for two reasons:

- The GIL. The flush is CPU-bound Python (record framing, CRCs, index keys) and the event loop
  needs the GIL back after every poll. Sleeping at least as long as each slice took gives the loop
  the GIL at least half of the time.
- The disk. Written back at full speed, a flush is a burst of tens of MiB at the device, and the
  journal's ``fdatasync`` on the same device queues behind it. Bookies fill their halves at the
  same pace, so on a shared machine all of them burst at once. There is no hurry: the other half
  took seconds to fill and will take as long again. So the flush is spread over part of the time
  its half took to fill.

The schedule covers the indexing too. After the appends and the log's fsync, the flush writes
the half's entry locations to RocksDB, a slice at a time: GIL-bound work that, done at the GIL
floor at the end of every flush (at once on every bookie), held each bookie's loop and journal
thread back and made the client's worst windows. So each indexed byte counts
``INDEX_WORK_PER_BYTE`` of an appended one, and the schedule spreads both.

How far to spread: over three quarters of the fill time, hurried once the active half is 85 %
full. The client's bad latency windows fell inside flushes, during which a bookie's journal
syncs were several times slower; spread thinner, a flush disturbs less. The measurements behind
each of these choices are in docs/performance.md.

The fill time is the past; the active half is the present. After a quiet spell the half took
long to fill (the schedule is then up to three quarters of ``flushInterval``), and a burst that
follows fills the other half in a fraction of that. So the schedule only holds while the flush is
ahead of the active half: a flush that has done less of its work than the active half has filled
of ``HURRY_AT_ACTIVE_SHARE`` goes at the GIL floor until it is ahead again. Without it, the first
flush after an idle spell kept its long schedule until the active half was 85 % full, and on a
loaded box could not finish at the floor before the active half was full: adds then waited for
room (docs/performance.md, "The flush behind the active half").

If the active half fills faster than that (past ``HURRY_AT_ACTIVE_SHARE`` full while the flush
runs), or an add is waiting for room, ``hurry`` drops the schedule back to the GIL floor, and
cuts short a pause it finds under way: after a quiet spell a half can take minutes to fill, and
a flush that slept out its schedule through a burst kept both halves full and adds waiting past
the client's timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

FLUSH_SLICE_ENTRIES = 256  # short enough that the loop gets the GIL back often
BUDGET_SHARE_OF_FILL_TIME = 0.75
HURRY_AT_ACTIVE_SHARE = 0.85  # of the active half filled while a flush runs: hurry it
INDEX_WORK_PER_BYTE = 0.25  # indexing a byte, in appended bytes of the schedule


class FlushPacer:
    """Schedules one flush of ``total_bytes`` over ``budget_s`` (0: no schedule, GIL floor only).

    Progress is counted in work: each byte appended counts 1, each byte indexed
    ``INDEX_WORK_PER_BYTE``, so the whole flush is ``total_work``."""

    def __init__(
        self, total_bytes: int, budget_s: float, active_share: Callable[[], float] = lambda: 0.0
    ) -> None:
        """``active_share``: how full the active half is (0..1), read from the flush's thread."""
        self._total = max(1, total_bytes) * (1.0 + INDEX_WORK_PER_BYTE)
        self._budget_s = max(0.0, budget_s)
        self._active_share = active_share
        self._began = time.perf_counter()
        self._hurried = budget_s <= 0
        self._woken = threading.Event()

    def hurry(self) -> None:
        """From any thread: keep only the GIL floor, from the pause under way on."""
        self._hurried = True
        self._woken.set()

    @property
    def total_work(self) -> float:
        return self._total

    def pause(self, slice_began: float, done_work: float) -> None:
        """After a slice that started at ``slice_began`` (``perf_counter``), with ``done_work``
        of the flush done: sleep as long as the slice took, or longer if ahead of schedule."""
        now = time.perf_counter()
        floor = now - slice_began
        done = min(1.0, done_work / self._total)
        if not self._hurried and done * HURRY_AT_ACTIVE_SHARE >= self._active_share():
            due = self._began + self._budget_s * done
            if due - now > floor:
                self._woken.wait(due - now - floor)  # the schedule's part: hurry() ends it
        time.sleep(floor)
