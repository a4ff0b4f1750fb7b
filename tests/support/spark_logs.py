"""Named logs for the Spark tests: commits made directly (no Spark), values read back, and a
streaming driver run as its own process (so a test can kill it with SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bkclient import sync as bksync
from bkclient.spark_sink import SinkOptions, commit_write, new_write_id, write_partition
from bkmeta.zookeeper_server import four_letter_word

STREAM_JOB = Path(__file__).with_name("spark_stream_job.py")


def append_commit(zk: str, log: str, values: Sequence[bytes]) -> None:
    """One commit of one segment holding ``values``."""
    opts = SinkOptions.parse({"zkServers": zk, "log": log})
    write_id = new_write_id()
    commit_write(opts, write_id, [write_partition(opts, write_id, 0, values)])


def log_values(zk: str, log: str) -> list[bytes]:
    with bksync.BookKeeper(zk) as bk:
        if log not in bk.logs().names():
            return []
        return [e.data for e in bk.logs().read(log)]


def commit_count(zk: str, log: str) -> int:
    with bksync.BookKeeper(zk) as bk:
        return len(bk.logs().commits(log)) if log in bk.logs().names() else 0


def start_stream_job(zk: str, source: str, sink: str, checkpoint: Path, mode: str) -> subprocess.Popen[bytes]:
    """The driver of ``source -> upper(value) -> sink`` in a new process group (Spark's JVM and
    Python workers included). ``mode``: ``forever`` (one commit per micro-batch, each second)
    or ``drain`` (what is there, then exit)."""
    return subprocess.Popen(
        [sys.executable, str(STREAM_JOB), zk, source, sink, str(checkpoint), mode],
        start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and everything it started: a crash, no clean shutdown."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def zk_sessions_requested(zk: str) -> int:
    """How many sessions clients have asked the ZooKeeper server of ``zk`` for since it started
    (its ``mntr`` counter ``zk_connection_request_count``: every connect request, so a session
    opened and closed within a job counts too; reconnects of a live session count again)."""
    host, _, port = zk.partition("/")[0].partition(",")[0].rpartition(":")
    for line in four_letter_word(host, int(port), "mntr", timeout=5.0).splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_connection_request_count":
            return int(value)
    raise AssertionError(f"ZooKeeper at {host}:{port} reports no zk_connection_request_count")
