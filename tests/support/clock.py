"""A ``bkmeta.clock.Clock`` a test moves by hand."""

from __future__ import annotations


class ManualClock:
    """Reads ``now_s`` (and the wall clock ``wall_ms`` + the same offset); ``step_s`` is added
    after every ``monotonic()`` reading, so code that polls a deadline sees time pass."""

    def __init__(self, now_s: float = 1000.0, wall_ms: int = 1_700_000_000_000, step_s: float = 0.0) -> None:
        self.now_s = now_s
        self.step_s = step_s
        self._start_s = now_s
        self._wall_ms = wall_ms

    def monotonic(self) -> float:
        now = self.now_s
        self.now_s += self.step_s
        return now

    def time_ms(self) -> int:
        return self._wall_ms + int((self.now_s - self._start_s) * 1000)

    def advance(self, seconds: float) -> None:
        self.now_s += seconds
