"""A streaming driver for the Spark tests: ``readStream.format("bookkeeper")`` -> upper-case ->
``writeStream.format("bookkeeper")`` with a checkpoint, the format found by Spark's data-source
discovery. Run as a script (see :func:`tests.support.spark_logs.start_stream_job`)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main(zk: str, source: str, sink: str, checkpoint: str, mode: str) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("pybk-stream-job")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        # Beside the checkpoint, in the test's own directory: a job that is killed leaves nothing in /tmp.
        .config("spark.local.dir", tempfile.mkdtemp(prefix="spark-local-", dir=Path(checkpoint).parent))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # No spark.dataSource.register: Spark finds format("bookkeeper") through pyspark_bookkeeper.
    stream = (
        spark.readStream.format("bookkeeper").option("zkServers", zk)
        .option("maxEntriesPerTrigger", "1").load(source)
        .selectExpr("upper(CAST(value AS STRING)) AS value")
        .writeStream.format("bookkeeper").option("zkServers", zk)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "forever":
        stream.trigger(processingTime="1 second").start(sink).awaitTermination()
    else:
        query = stream.trigger(availableNow=True).start(sink)
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
