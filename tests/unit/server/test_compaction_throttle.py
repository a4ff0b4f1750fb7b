"""Compaction's throttle: whichever of the byte and entry rates is slower sets the pause, and a
pass with a time limit stops at its deadline or when the collector stops."""

from __future__ import annotations

import threading

import pytest

from bookie.gc.collector import StopOrDeadline
from bookie.storage.compaction import ByteThrottle, CompactionStopped


class _RecordingStop(threading.Event):
    """Never set; remembers how long each pause asked to wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return False


@pytest.mark.parametrize(
    ("rate", "entries_rate", "expected_s"), [(1000, 0, 2.0), (0, 10, 5.0), (1000, 10, 5.0), (100, 10, 20.0)]
)
def test_the_slower_rate_sets_the_pause(rate: int, entries_rate: int, expected_s: float) -> None:
    stop = _RecordingStop()
    throttle = ByteThrottle(rate, stop, entries_rate)
    throttle.pause(2000, 50)
    assert stop.waits and stop.waits[0] == pytest.approx(expected_s, abs=0.1)


def test_no_rate_no_pause() -> None:
    stop = _RecordingStop()
    ByteThrottle(0, stop).pause(10**9, 10**6)
    assert stop.waits == []


def test_a_pass_past_its_max_time_stops_and_so_does_one_whose_collector_stops() -> None:
    collector_stop = threading.Event()
    assert StopOrDeadline(collector_stop, 0.0).is_set()
    running = StopOrDeadline(collector_stop, 3600.0)
    throttle = ByteThrottle(0, running)
    throttle.check()  # neither yet
    collector_stop.set()
    with pytest.raises(CompactionStopped):
        throttle.check()
