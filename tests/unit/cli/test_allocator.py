"""pybk's malloc settings: a message-sized buffer allocated again and again reuses its pages instead
of faulting fresh ones in each time, and a setting the environment makes is left alone.

Each case runs in a child interpreter (the settings are process-wide) and counts the page faults
of receiving a 4 MiB message 40 times; the count is the kernel's, not a timing."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc settings"
)

ROUNDS = 40
PAGES_PER_BUFFER = 4 * 1024 * 1024 // 4096

# The bookie's add-port read of a 4 MiB frame arriving in 256 KiB socket reads (asyncio's
# StreamReader grows its buffer, copies the frame out and frees the buffer), ROUNDS times.
CHILD = f"""
import asyncio, json, resource
from pybk.allocator import keep_large_buffers
keep_large_buffers()
chunk = b"x" * (256 * 1024)

async def main():
    reader = asyncio.StreamReader()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range({ROUNDS}):
        for _ in range(16):
            reader.feed_data(chunk)
        await reader.readexactly(16 * len(chunk))
    print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))

asyncio.run(main())
"""


def faults_per_round(env: dict[str, str]) -> float:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    child_env.update(env)
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=child_env, capture_output=True, text=True, check=True
    ).stdout
    return float(json.loads(out)) / ROUNDS


def test_a_large_buffer_reuses_its_pages() -> None:
    assert faults_per_round({}) < PAGES_PER_BUFFER / 10


def test_the_environment_setting_wins() -> None:
    # A 128 KiB threshold set by the operator: every 4 MiB buffer is a fresh mapping again.
    assert faults_per_round({"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}) > PAGES_PER_BUFFER / 2
