"""pybk's young-generation GC threshold: raised for pybk's processes, never lowered, and a collector
switched off stays off. Each case runs in a child interpreter (the setting is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

from pybk.gc_setting import YOUNG_THRESHOLD

CHILD = """
import gc, json, sys
setup = sys.argv[1]
if setup == "higher":
    gc.set_threshold(1_000_000, 10, 10)
elif setup == "off":
    gc.set_threshold(0)
from pybk.gc_setting import collect_young_garbage_less_often
collect_young_garbage_less_often()
print(json.dumps(gc.get_threshold()))
"""


def threshold_after(setup: str) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, setup], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out))


def test_the_young_threshold_is_raised_and_the_older_ones_kept() -> None:
    assert threshold_after("default") == [YOUNG_THRESHOLD, 10, 10]


def test_a_higher_threshold_is_kept() -> None:
    assert threshold_after("higher") == [1_000_000, 10, 10]


def test_a_collector_switched_off_stays_off() -> None:
    assert threshold_after("off")[0] == 0
