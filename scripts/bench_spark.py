"""Spark into and out of BookKeeper: local Spark (``local[2]``) writes N MB of 1 KiB values to a
log and reads them back, batch and streaming, next to a plain bkclient writer on the same
cluster (the ceiling). Usage (a cluster: ``scripts/bench_spark.sh`` starts a fresh one)::

    python scripts/bench_spark.py --zk 127.0.0.1:22181 --mb 200 [--json]

Every run uses ensemble 3, write and ack quorum 2 (E3 Qw2 Qa2) and new log names.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from bkclient.spark_sink import SinkOptions, commit_write, new_write_id, write_partition_batches

SIZE = 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string")
    parser.add_argument("--mb", type=int, default=200, help="MiB of 1 KiB values per phase (default 200)")
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    entries = args.mb * 1024 * 1024 // SIZE
    run = uuid.uuid4().hex[:8]
    options = {"zkServers": args.zk, "ensembleSize": "3", "writeQuorumSize": "2", "ackQuorumSize": "2"}
    results: dict[str, Any] = {"entries": entries, "value_bytes": SIZE, "partitions": args.partitions}

    def phase(name: str, fn: Callable[[], object]) -> None:
        started = time.perf_counter()
        fn()
        seconds = time.perf_counter() - started
        results[name] = {
            "seconds": round(seconds, 2),
            "mb_s": round(entries * SIZE / seconds / 1e6, 1),
            "entries_s": round(entries / seconds),
        }
        if not args.json:
            print(f"{name:>22}: {results[name]['mb_s']:7.1f} MB/s {results[name]['entries_s']:9d} entries/s "
                  f"({seconds:.1f} s)", flush=True)

    plain = SinkOptions.parse({**options, "log": f"plain-{run}"})
    phase("bkclient_writer", lambda: plain_write(plain, entries))

    from pyspark.sql import SparkSession

    from bkclient.spark import BookKeeperDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]").appName("pybk-bench-spark")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.local.dir", tempfile.mkdtemp(prefix="pybk-bench-spark-"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BookKeeperDataSource)
    log = f"bench-{run}"
    source = spark.range(0, entries, numPartitions=args.partitions).selectExpr(
        f"CAST(substr(concat(CAST(id AS STRING), repeat('x', {SIZE})), 1, {SIZE}) AS BINARY) AS value"
    )
    # Spark's own cost of making and handing over the rows, no sink: the floor of any sink's time.
    phase("spark_noop_write", lambda: source.write.format("noop").mode("overwrite").save())
    phase("spark_batch_write", lambda: source.write.format("bookkeeper").options(**options)
          .mode("append").save(log))
    phase("spark_batch_read", lambda: spark.read.format("bookkeeper").options(**options).load(log)
          .selectExpr("sum(length(value))").collect())

    def stream(sink: str, **sink_options: str) -> None:
        query = (
            spark.readStream.format("bookkeeper").options(**options).load(log).select("value")
            .writeStream.format(sink).options(**sink_options)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="pybk-bench-chk-"))
            .trigger(availableNow=True).start(f"copy-{run}" if sink == "bookkeeper" else None)
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"streaming query failed: {query.exception()}")

    phase("spark_stream_read", lambda: stream("noop"))
    phase("spark_stream_copy", lambda: stream("bookkeeper", **options))
    spark.stop()
    if args.json:
        print(json.dumps(results))
    return 0


def plain_write(opts: SinkOptions, entries: int) -> None:
    """One bkclient segment writer, values sent in batches of 4,096 (as an Arrow batch would)."""
    write_id = new_write_id()
    value = b"x" * SIZE
    batches = ([value] * min(4096, entries - i) for i in range(0, entries, 4096))
    commit_write(opts, write_id, [write_partition_batches(opts, write_id, 0, batches)])


if __name__ == "__main__":
    sys.exit(main())
