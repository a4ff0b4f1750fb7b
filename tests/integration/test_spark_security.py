"""``format("bookkeeper")`` in a real local Spark against a cluster with security on: bookies
over TLS that authenticate clients by token and check their rights, ZooKeeper over TLS with the
cluster's digest ACLs (``zkEnableSecurity``). A job given the credentials' files as options
writes and reads back, batch and streaming; the same job without them is refused, saying why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.bookies import BookieFactory
from tests.support.security import SecureZooKeeper, secure_zk, token_cluster
from tests.support.spark_session import spark

from bkclient import sync as bksync
from bkclient.spark_sink import SinkOptions

__all__ = ["secure_zk", "spark"]

pytestmark = pytest.mark.integration

pyspark = pytest.importorskip("pyspark", reason="the spark extra is part of `make install`")


async def test_a_job_with_credentials_writes_and_reads_a_secure_cluster_and_one_without_is_refused(
    spark: Any, secure_zk: SecureZooKeeper, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    options = await token_cluster(secure_zk, bookie_factory, tmp_path)
    expected = [str(i).encode() for i in range(1000)]

    def job() -> None:
        # Spark finds Python data sources through the JVM thread's active session, and this runs
        # on a worker thread (the test's event loop keeps the main one).
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        df = spark.range(0, 1000, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
        df.write.format("bookkeeper").options(**options).mode("append").save("secure")
        read = spark.read.format("bookkeeper").options(**options).load("secure")
        assert [bytes(r.value) for r in read.collect()] == expected

        # A short stream: the log copied into another one, through the same credentials.
        query = (
            spark.readStream.format("bookkeeper").options(**options).load("secure")
            .selectExpr("concat('copy-', CAST(value AS STRING)) AS value")
            .writeStream.format("bookkeeper").options(**options)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True).start("secure-copy")
        )
        query.awaitTermination(120)
        assert query.exception() is None
        opts = SinkOptions.parse({**options, "log": "secure-copy"})
        with bksync.BookKeeper(opts.zk_servers, opts.client_config()) as bk:
            assert [e.data for e in bk.logs().read("secure-copy")] == [b"copy-" + v for v in expected]

        # No credentials at all: ZooKeeper's TLS port does not answer a plaintext client.
        with pytest.raises(Exception, match=r"cannot connect to ZooKeeper .* needs zkTlsTrustStore"):
            df.write.format("bookkeeper").option("zkServers", options["zkServers"]).mode("append") \
                .save("secure")
        # ZooKeeper's credentials but no bookie token: the bookies refuse the adds.
        no_token = {k: v for k, v in options.items() if k != "clientAuthTokenFile"}
        with pytest.raises(Exception, match="UnauthorizedAccessError: EUA: authentication required"):
            df.write.format("bookkeeper").options(**no_token).mode("append").save("secure")
        assert [bytes(r.value) for r in read.collect()] == expected  # nothing more was committed

    await asyncio.to_thread(job)
