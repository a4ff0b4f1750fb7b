"""``format("bookkeeper")`` in a real local Spark (JVM + Python workers) against a real ZooKeeper
and real bookie processes: batch appends and overwrite, a failing job, a streaming query run twice
over growing input, a micro-batch replayed after Spark aborted it, reads back through Spark, and
the errors a user gets for bad input."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.client_cluster import ClientCluster, client_cluster
from tests.support.spark_logs import zk_sessions_requested
from tests.support.spark_session import spark

from bkclient import sync as bksync
from bkclient.spark_sink import SinkOptions, commit_write, new_write_id, write_partition
from bkmeta.named_log import LOG_NAME_KEY

__all__ = ["client_cluster", "spark"]

pytestmark = pytest.mark.integration

pyspark = pytest.importorskip("pyspark", reason="the spark extra is part of `make install`")


def log_values(zk: str, log: str) -> list[bytes]:
    with bksync.BookKeeper(zk) as bk:
        return [e.data for e in bk.logs().read(log)]


def tagged_ledgers(zk: str, log: str) -> set[int]:
    with bksync.BookKeeper(zk) as bk:
        return {
            lid for lid in bk.list_ledgers()
            if bk.ledger_metadata(lid).custom_metadata.get(LOG_NAME_KEY) == f"/pybk/logs/{log}".encode()
        }


async def test_batch_append_overwrite_and_read_back(spark: Any, client_cluster: ClientCluster) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts

    def job() -> None:
        # 4 partitions in a known order (one of them empty): the log keeps partition order.
        rows = [(f"row-{i}",) for i in range(300)]
        df = spark.createDataFrame(rows, "value string").repartitionByRange(3, "value")
        expected = [r.value.encode() for r in df.collect()]
        df.write.format("bookkeeper").option("zkServers", zk).mode("append").save("events")
        binary = spark.createDataFrame([(bytes([i, 0, 255]),) for i in range(10)], "value binary").coalesce(1)
        binary.write.format("bookkeeper").option("zkServers", zk).option("log", "events") \
            .option("ensembleSize", "3").option("writeQuorumSize", "3").option("ackQuorumSize", "2") \
            .option("digestType", "crc32").mode("append").save()
        expected += [bytes([i, 0, 255]) for i in range(10)]
        assert log_values(zk, "events") == expected

        read = spark.read.format("bookkeeper").option("zkServers", zk).load("events")
        assert read.schema.simpleString() == "struct<ledger_id:bigint,entry_id:bigint,value:binary>"
        got = read.collect()
        assert [bytes(r.value) for r in got] == expected
        assert read.groupBy("ledger_id").count().count() == 4  # 3 + 1 segments
        assert read.where("value = X'0500FF'").count() == 1

        with bksync.BookKeeper(zk) as bk:
            segments = bk.logs().segments("events")
            assert bk.ledger_metadata(segments[-1].ledger_id).write_quorum_size == 3
        before = tagged_ledgers(zk, "events")
        assert before == {s.ledger_id for s in segments}

        spark.createDataFrame([("new",)], "value string").write.format("bookkeeper") \
            .option("zkServers", zk).mode("overwrite").save("events")
        assert log_values(zk, "events") == [b"new"]
        assert not (tagged_ledgers(zk, "events") & before)  # the replaced ledgers are deleted

    await asyncio.to_thread(job)


async def test_a_job_of_many_tasks_opens_few_zookeeper_sessions(
    spark: Any, client_cluster: ClientCluster
) -> None:
    """One client per Python worker, not per task: 40 tasks on local[2] run on a couple of
    reused workers, so the job asks ZooKeeper for a few sessions (the workers' and the commit's),
    where a session per task would ask for at least 40."""
    await client_cluster.client()
    zk = client_cluster.zk_hosts

    def job() -> tuple[int, int]:
        # Spark finds Python data sources through the JVM thread's active session (see below).
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        df = spark.range(0, 4000, numPartitions=40).selectExpr("CAST(id AS STRING) AS value")
        before = zk_sessions_requested(zk)
        df.write.format("bookkeeper").option("zkServers", zk).mode("append").save("many")
        opened = zk_sessions_requested(zk) - before
        with bksync.BookKeeper(zk) as bk:
            return opened, len(bk.logs().segments("many"))

    opened, segments = await asyncio.to_thread(job)
    assert segments == 40  # one ledger per task: 40 tasks wrote
    # 2 concurrent workers (perhaps replaced once each), the commit's worker, and slack for a
    # reconnect under load; far below one per task.
    assert opened <= 6, f"a 40-task job asked ZooKeeper for {opened} sessions"


async def test_a_stream_of_many_micro_batches_opens_few_zookeeper_sessions(
    spark: Any, client_cluster: ClientCluster, tmp_path: Path
) -> None:
    """Each micro-batch commits from a driver-side Python worker that Spark reuses: through that
    worker's shared client, 12 micro-batches ask ZooKeeper for a few sessions, not one each."""
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    source = tmp_path / "in"
    source.mkdir()
    for i in range(12):
        (source / f"{i:02d}.txt").write_text(f"line-{i}\n")

    def job() -> tuple[int, int]:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        before = zk_sessions_requested(zk)
        query = (
            spark.readStream.option("maxFilesPerTrigger", "1").text(str(source))
            .writeStream.format("bookkeeper").option("zkServers", zk)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True).start("batches")
        )
        query.awaitTermination(300)
        assert query.exception() is None
        opened = zk_sessions_requested(zk) - before
        with bksync.BookKeeper(zk) as bk:
            return opened, len(bk.logs().commits("batches"))

    opened, commits = await asyncio.to_thread(job)
    assert commits == 12  # one commit per micro-batch
    assert opened <= 6, f"12 micro-batches asked ZooKeeper for {opened} sessions"


async def test_failed_job_commits_nothing_and_leaves_no_ledger(
    spark: Any, client_cluster: ClientCluster
) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts

    def job() -> None:
        spark.createDataFrame([("kept",)], "value string").write.format("bookkeeper") \
            .option("zkServers", zk).mode("append").save("audit")
        committed = tagged_ledgers(zk, "audit")
        # One task fails late in its partition, by when the other, small task has written and
        # closed its ledger: the abort must delete both. Late means past the first Arrow batches
        # (spark.sql.execution.arrow.maxRecordsPerBatch, 10,000 rows): a null in the first batch
        # fails the task before it opens a ledger, and the abort could then race the small task.
        rows: list[tuple[int, tuple[int, str | None]]] = [(0, (i, f"other-{i}")) for i in range(10)]
        rows += [(1, (i, f"row-{i}" if i != 30_000 else None)) for i in range(30_001)]
        by_task = spark.sparkContext.parallelize(rows, 1).partitionBy(2, lambda task: task)
        def in_order(pairs: Iterator[tuple[int, tuple[int, str | None]]]) -> list[tuple[str | None]]:
            return [(value,) for _, (_, value) in sorted(pairs, key=lambda pair: pair[1][0])]

        df = spark.createDataFrame(by_task.mapPartitions(in_order), "value string")
        with pytest.raises(Exception, match="partition 1, row 30000: 'value' is null"):
            df.write.format("bookkeeper").option("zkServers", zk).mode("append").save("audit")
        assert log_values(zk, "audit") == [b"kept"]
        assert tagged_ledgers(zk, "audit") == committed
        with bksync.BookKeeper(zk) as bk:
            assert bk.logs().pending("audit") == {}

    await asyncio.to_thread(job)


async def test_stream_appends_each_micro_batch_once(
    spark: Any, client_cluster: ClientCluster, tmp_path: Path
) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def run_stream(**options: str) -> None:
        # Spark finds Python data sources for a stream through the JVM thread's active session,
        # and this runs on a worker thread (the test's event loop keeps the main one).
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        query = (
            spark.readStream.text(str(source)).writeStream.format("bookkeeper")
            .option("zkServers", zk).option("checkpointLocation", str(checkpoint)).options(**options)
            .trigger(availableNow=True).start("stream")
        )
        query.awaitTermination(120)
        assert query.exception() is None

    def job() -> None:
        (source / "a.txt").write_text("a1\na2\n")
        run_stream()
        (source / "b.txt").write_text("b1\n")
        run_stream()  # a restart from the checkpoint: only the new file is written
        assert sorted(log_values(zk, "stream")) == [b"a1", b"a2", b"b1"]
        with bksync.BookKeeper(zk) as bk:
            assert len(bk.logs().segments("stream")) == 2
        # A micro-batch Spark would replay after a crash between its write and its commit:
        opts = SinkOptions.parse({"zkServers": zk, "log": "stream"})
        write_id = new_write_id()
        replay = write_partition(opts, write_id, 0, [b"b1"])
        result = commit_write(opts, write_id, [replay], txn=(f"checkpoint:{checkpoint}", 1))
        assert not result.committed and result.last_version == 1
        assert sorted(log_values(zk, "stream")) == [b"a1", b"a2", b"b1"]
        # A checkpoint deleted and made again restarts batch ids: refused loudly, not dropped.
        shutil.rmtree(checkpoint)
        (source / "c.txt").write_text("c1\n")
        with pytest.raises(Exception, match="was the checkpoint reset"):
            run_stream()
        assert sorted(log_values(zk, "stream")) == [b"a1", b"a2", b"b1"]
        with bksync.BookKeeper(zk) as bk:
            assert bk.logs().pending("stream") == {}
        # As the error advises: the new query gets its own app id (and reads every file again).
        run_stream(txnAppId="second-query")
        assert sorted(log_values(zk, "stream")) == sorted([b"a1", b"a2", b"b1"] * 2 + [b"c1"])
        # outputMode("complete"): every batch is the whole result, so it replaces the log.
        run_counts()
        assert sorted(log_values(zk, "counts")) == [b"a1=1", b"a2=1", b"b1=1", b"c1=1"]
        (source / "d.txt").write_text("a1\n")
        run_counts()
        assert sorted(log_values(zk, "counts")) == [b"a1=2", b"a2=1", b"b1=1", b"c1=1"]

    def run_counts() -> None:
        query = (
            spark.readStream.text(str(source)).groupBy("value").count()
            .selectExpr("concat(value, '=', CAST(count AS STRING)) AS value")
            .writeStream.outputMode("complete").format("bookkeeper").option("zkServers", zk)
            .option("checkpointLocation", str(tmp_path / "counts-checkpoint"))
            .trigger(availableNow=True).start("counts")
        )
        query.awaitTermination(120)
        assert query.exception() is None

    await asyncio.to_thread(job)


async def test_a_stream_batch_aborted_by_a_failed_task_is_replayed_and_commits(
    spark: Any, client_cluster: ClientCluster, tmp_path: Path
) -> None:
    """Spark aborts a micro-batch whose task failed and stops the query; restarted, the query
    replays that batch under the same write id. The abort must not refuse that replay (a batch
    write's abort marks its write aborted; a stream's must not)."""
    await client_cluster.client()
    zk = client_cluster.zk_hosts
    source, checkpoint, failing = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "failing"
    source.mkdir()
    (source / "a.txt").write_text("a1\na2\n")
    failing.write_text("the tasks fail while this file exists")
    flag = str(failing)

    @pyspark.sql.functions.udf(returnType="string", useArrow=False)  # Arrow UDFs need pandas
    def fails_while_flagged(value: str) -> str:
        if os.path.exists(flag):
            raise RuntimeError("a task of this batch fails")
        return value

    def run_stream() -> None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        query = (
            spark.readStream.text(str(source)).select(fails_while_flagged("value").alias("value"))
            .writeStream.format("bookkeeper").option("zkServers", zk)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start("replayed")
        )
        query.awaitTermination(120)
        assert query.exception() is None

    def job() -> None:
        with pytest.raises(Exception, match="a task of this batch fails"):
            run_stream()
        with bksync.BookKeeper(zk) as bk:
            assert not bk.logs().names() or bk.logs().segments("replayed") == []
        failing.unlink()
        run_stream()  # batch 0 again, its write id again
        assert sorted(log_values(zk, "replayed")) == [b"a1", b"a2"]
        with bksync.BookKeeper(zk) as bk:
            assert bk.logs().pending("replayed") == {}
            assert [c.seq for c in bk.logs().commits("replayed")] == [0]

    await asyncio.to_thread(job)


async def test_bad_input_is_refused_before_anything_is_written(
    spark: Any, client_cluster: ClientCluster
) -> None:
    await client_cluster.client()
    zk = client_cluster.zk_hosts

    def job() -> None:
        df = spark.createDataFrame([(1, "x")], "id int, name string")
        with pytest.raises(Exception, match="no 'value' column"):
            df.write.format("bookkeeper").option("zkServers", zk).mode("append").save("bad")
        with pytest.raises(Exception, match="column 'value' is int"):
            df.selectExpr("id AS value").write.format("bookkeeper").option("zkServers", zk) \
                .mode("append").save("bad")
        ok = df.selectExpr("name AS value")
        with pytest.raises(Exception, match="unknown bookkeeper option 'ensemble'"):
            ok.write.format("bookkeeper").option("zkServers", zk).option("ensemble", "3") \
                .mode("append").save("bad")
        with pytest.raises(Exception, match="'zkServers'"):
            ok.write.format("bookkeeper").mode("append").save("bad")
        with pytest.raises(Exception, match="log name"):
            ok.write.format("bookkeeper").option("zkServers", zk).mode("append") \
                .save("a/b")
        with pytest.raises(Exception, match="'value' is null"):
            spark.createDataFrame([(None,)], "value string").write.format("bookkeeper") \
                .option("zkServers", zk).mode("append").save("bad")
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        with pytest.raises(Exception, match="checkpointLocation"):
            spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value") \
                .writeStream.format("bookkeeper").option("zkServers", zk).start("bad")
        assert tagged_ledgers(zk, "bad") == set()

    await asyncio.to_thread(job)
