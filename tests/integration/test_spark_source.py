"""``spark.readStream.format("bookkeeper")`` in a real local Spark against a real ZooKeeper and
real bookie processes: micro-batches bounded by the rate limit, a restart from the checkpoint,
``startingOffsets``, a log truncated under a query (failOnDataLoss), split reads of a long
segment, and a driver killed with SIGKILL mid-stream that restarts with each entry written once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster
from tests.support.spark_logs import (
    append_commit,
    commit_count,
    kill_group,
    log_values,
    start_stream_job,
)
from tests.support.spark_session import spark

from bkclient import sync as bksync

__all__ = ["client_cluster", "spark"]

pytestmark = pytest.mark.integration


def values(commit: int, count: int = 2) -> list[bytes]:
    return [f"c{commit}-e{i}".encode() for i in range(count)]


async def test_stream_reads_whole_commits_resumes_and_fails_on_truncation(
    spark: Any, client_cluster: ClientCluster, tmp_path: Path
) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts

    def run(checkpoint: str, sink: str, **options: str) -> Any:
        # As in test_spark_sink: streams need the JVM thread's active session.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        query = (
            spark.readStream.format("bookkeeper").option("zkServers", zk).options(**options).load("src")
            .selectExpr("upper(CAST(value AS STRING)) AS value")
            .writeStream.format("bookkeeper").option("zkServers", zk)
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True).start(sink)
        )
        query.awaitTermination(120)
        return query

    def job() -> None:
        for commit in range(3):
            append_commit(zk, "src", values(commit))
        expected = [v.upper() for c in range(3) for v in values(c)]
        query = run("chk", "dst", maxEntriesPerTrigger="3")
        assert query.exception() is None
        assert log_values(zk, "dst") == expected
        # 3 entries a trigger: one commit of 2 each time (a second would pass the limit).
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [2, 2, 2]

        append_commit(zk, "src", values(3))
        assert run("chk", "dst").exception() is None  # from the checkpoint: only the new commit
        expected += [v.upper() for v in values(3)]
        assert log_values(zk, "dst") == expected

        assert run("chk-latest", "dst-latest", startingOffsets="latest").exception() is None
        assert log_values(zk, "dst-latest") == []

        # Commits 4 and 5 arrive, then retention removes all but the newest before the query
        # reads them: commit 4 is lost, and the query says so.
        append_commit(zk, "src", values(4))
        append_commit(zk, "src", values(5))
        with bksync.BookKeeper(zk) as bk:
            bk.logs().truncate("src", keep_commits=1)
        with pytest.raises(Exception, match=r"commits 4 of this micro-batch's 4\.\.5 are gone"):
            run("chk", "dst")
        assert log_values(zk, "dst") == expected
        assert run("chk", "dst", failOnDataLoss="false").exception() is None
        assert log_values(zk, "dst") == expected + [v.upper() for v in values(5)]

        # A batch read splits a segment longer than maxEntriesPerPartition, in order.
        append_commit(zk, "long", [str(i).encode() for i in range(10)])
        read = spark.read.format("bookkeeper").option("zkServers", zk) \
            .option("maxEntriesPerPartition", "4").load("long")
        assert read.rdd.getNumPartitions() == 3
        assert [bytes(r.value) for r in read.collect()] == [str(i).encode() for i in range(10)]

        # A log without entries (here a commit of empty partitions) reads as no rows.
        append_commit(zk, "no-entries", [])
        assert spark.read.format("bookkeeper").option("zkServers", zk).load("no-entries").collect() == []

    await asyncio.to_thread(job)


async def test_driver_killed_mid_stream_restarts_with_each_entry_once(
    client_cluster: ClientCluster, tmp_path: Path
) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    commits = 30
    checkpoint = tmp_path / "chk"

    def job() -> None:
        for commit in range(commits):
            append_commit(zk, "in", values(commit, 3))
        driver = start_stream_job(zk, "in", "out", checkpoint, "forever")
        try:
            # One commit a micro-batch, one a second: kill once a few have gone through.
            while commit_count(zk, "out") < 3:
                assert driver.poll() is None, "the streaming driver exited on its own"
                time.sleep(0.2)
        finally:
            kill_group(driver)
        assert commit_count(zk, "out") < commits  # killed mid-stream, not after it
        drain = start_stream_job(zk, "in", "out", checkpoint, "drain")
        assert drain.wait(timeout=180) == 0
        assert log_values(zk, "out") == [v.upper() for c in range(commits) for v in values(c, 3)]

    await asyncio.to_thread(job)
