"""``pybk bench spark``: local Spark writes N MB of 1 KiB values into a log and reads them back,
batch and streaming, next to what bounds it on the same cluster in the same run:

- ``bkclient_writer``: one plain bkclient segment writer in this process, before Spark starts
  (the ceiling: the client and the bookies without Spark);
- ``spark_noop_write``: Spark making the rows into its ``noop`` sink (the JVM's own cost);
- ``spark_python_noop_write``: the rows handed as Arrow batches to a Python data source that
  drops them (Spark's cost of any Python sink; the session's first Python job, so it also pays
  the Python workers' start);
- ``spark_batch_write``: ``format("bookkeeper")``, the first job whose workers import the client
  and open their ZooKeeper session and bookie connections; ``spark_batch_write_again``: the same
  job again, on workers that have them already;
- ``spark_batch_read`` (the session's first read: its planning workers start, and the JVM runs
  the read path for the first time), ``spark_batch_read_again`` (the same read again),
  ``spark_stream_read`` (``availableNow`` into ``noop``) and ``spark_stream_copy`` (a streaming
  read of the log written into a new log).

Each phase also reports the CPU seconds Spark's processes used (this process's descendants:
the JVM and its Python workers; ``spark_jvm`` the JVM's share), and with ``--cluster-pid`` those
of the cluster's process tree (``pybk localcluster``: ZooKeeper and the bookies): on a machine of
a few cores the figures say where the time went when wall-clock rates are noisy. Every run uses
ensemble 3, write and ack quorum 2 (E3 Qw2 Qa2) and new log names. ``scripts/bench_spark.sh``
starts a fresh cluster."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bkclient.spark_sink import SinkOptions, commit_write, new_write_id, write_partition_batches
from pybk.arg_types import positive

for _module in ("pyspark", "pyarrow"):  # the spark extra; imported only when the bench runs
    if importlib.util.find_spec(_module) is None:
        raise ModuleNotFoundError(f"No module named {_module!r}", name=_module)

VALUE_BYTES = 1024
ARROW_BATCH = 10_000  # values per batch of the plain writer (Spark's maxRecordsPerBatch)


def register(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "spark", help="local Spark into and out of a log, batch and streaming, next to a plain writer"
    )
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    parser.add_argument("--mb", type=positive, default=200, help="MiB of 1 KiB values a phase (default 200)")
    parser.add_argument("--partitions", type=positive, default=2, help="Spark partitions (default 2)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument(
        "--cluster-pid", type=positive, help="also count the CPU of this process tree (pybk localcluster)"
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), e.g. spark.python.worker.reuse=false",
    )
    parser.set_defaults(func=main)  # --json: the bench group adds it to every target


def main(args: argparse.Namespace) -> int:
    bench = SparkBench(args)
    bench.run()
    if args.json:
        print(json.dumps(bench.results))
    return 1 if bench.failed else 0


class SparkBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.entries = args.mb * 1024 * 1024 // VALUE_BYTES
        self.run_id = uuid.uuid4().hex[:8]
        self.failed = False
        self.options = {
            "zkServers": args.zk, "ensembleSize": "3", "writeQuorumSize": "2", "ackQuorumSize": "2",
        }
        self.results: dict[str, Any] = {
            "entries": self.entries, "value_bytes": VALUE_BYTES, "partitions": args.partitions,
            "master": args.master, "conf": args.conf, "load_average_1m": round(os.getloadavg()[0], 2),
        }

    def phase(self, name: str, fn: Callable[[], object]) -> None:
        cpu_before = self._cpu()
        started = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a loaded box can fail a phase (Spark, the client): keep the rest
            self.results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            self.failed = True
            print(f"{name}: failed: {exc}", file=sys.stderr, flush=True)
            return
        seconds = time.perf_counter() - started
        cpu = {key: round(after - cpu_before.get(key, 0.0), 1) for key, after in self._cpu().items()}
        self.results[name] = {
            "seconds": round(seconds, 2),
            "mb_s": round(self.entries * VALUE_BYTES / seconds / 1e6, 1),
            "entries_s": round(self.entries / seconds),
            "cpu_s": cpu,
        }
        if not self.args.json:
            r = self.results[name]
            spent = ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
            print(f"{name:>24}: {r['mb_s']:6.1f} MB/s {r['entries_s']:8d} entries/s ({seconds:5.1f} s; "
                  f"CPU s: {spent})", flush=True)

    def _cpu(self) -> dict[str, float]:
        cpu = {"bench": process_tree_cpu(os.getpid(), descendants_only=False) - process_tree_cpu(os.getpid())}
        cpu["spark"] = process_tree_cpu(os.getpid())
        cpu["spark_jvm"] = process_tree_cpu(os.getpid(), command="java")
        if self.args.cluster_pid is not None:
            cpu["cluster"] = process_tree_cpu(self.args.cluster_pid, descendants_only=False)
        return cpu

    def run(self) -> None:
        plain = SinkOptions.parse({**self.options, "log": f"plain-{self.run_id}"})
        self.phase("bkclient_writer", lambda: plain_write(plain, self.entries))
        spark = self._session()
        try:
            self._spark_phases(spark)
        finally:
            spark.stop()

    def _session(self) -> Any:
        from pyspark.sql import SparkSession

        from bkclient.spark import BookKeeperDataSource

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this interpreter
        builder = (
            SparkSession.builder.master(self.args.master).appName("pybk-bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(self.args.partitions))
            .config("spark.local.dir", tempfile.mkdtemp(prefix="pybk-bench-spark-"))
        )
        for setting in self.args.conf:
            key, sep, value = setting.partition("=")
            if not sep:
                raise SystemExit(f"--conf {setting!r}: expected KEY=VALUE")
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(BookKeeperDataSource)
        spark.dataSource.register(python_noop_source())
        return spark

    def _spark_phases(self, spark: Any) -> None:
        log, copy = f"bench-{self.run_id}", f"copy-{self.run_id}"
        options = self.options
        source = spark.range(0, self.entries, numPartitions=self.args.partitions).selectExpr(
            f"CAST(substr(concat(CAST(id AS STRING), repeat('x', {VALUE_BYTES})), 1, {VALUE_BYTES}) "
            "AS BINARY) AS value"
        )
        source.limit(1000).write.format("noop").mode("overwrite").save()  # the JVM's first job
        self.phase("spark_noop_write", lambda: source.write.format("noop").mode("overwrite").save())
        self.phase("spark_python_noop_write", lambda: source.write.format("pybk_bench_noop")
                   .mode("append").save())
        self.phase("spark_batch_write", lambda: source.write.format("bookkeeper").options(**options)
                   .mode("append").save(log))
        self.phase("spark_batch_write_again", lambda: source.write.format("bookkeeper")
                   .options(**options).mode("append").save(f"{log}-again"))
        def batch_read() -> None:
            spark.read.format("bookkeeper").options(**options).load(log).selectExpr(
                "sum(length(value))"
            ).collect()

        self.phase("spark_batch_read", batch_read)
        self.phase("spark_batch_read_again", batch_read)

        def stream(sink: str, **sink_options: str) -> None:
            query = (
                spark.readStream.format("bookkeeper").options(**options).load(log).select("value")
                .writeStream.format(sink).options(**sink_options)
                .option("checkpointLocation", tempfile.mkdtemp(prefix="pybk-bench-chk-"))
                .trigger(availableNow=True).start(copy if sink == "bookkeeper" else None)
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")

        self.phase("spark_stream_read", lambda: stream("noop"))
        self.phase("spark_stream_copy", lambda: stream("bookkeeper", **options))


def plain_write(opts: SinkOptions, entries: int) -> None:
    """One bkclient segment writer, values handed over in batches as Spark's Arrow batches are."""
    write_id = new_write_id()
    value = b"x" * VALUE_BYTES
    batches = ([value] * min(ARROW_BATCH, entries - i) for i in range(0, entries, ARROW_BATCH))
    commit_write(opts, write_id, [write_partition_batches(opts, write_id, 0, batches)])


def python_noop_source() -> type:
    """A Python data source whose Arrow writer drops every batch: what Spark costs any Python
    sink. Made in a function so Spark's workers get the class pickled by value (nothing to import)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class DroppingWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            for _batch in iterator:
                pass
            return WriterCommitMessage()

    class NoopSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "pybk_bench_noop"

        def writer(self, schema: Any, overwrite: bool) -> DroppingWriter:
            return DroppingWriter()

    return NoopSource


def process_tree_cpu(root: int, *, descendants_only: bool = True, command: str | None = None) -> float:
    """CPU seconds (user + system, reaped children included) of ``root``'s live descendants, and
    of ``root`` itself unless ``descendants_only``; with ``command``, only of the processes of
    that name (``java``: Spark's JVM, apart from its Python workers). Linux's /proc; 0.0 where
    there is none."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        head, _, tail = stat.rpartition(")")  # the command name may hold spaces and parentheses
        fields = tail.split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
        names[pid] = head.partition("(")[2]
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    counted = list(children.get(root, [])) if descendants_only else [root]
    total = 0.0
    while counted:
        pid = counted.pop()
        if command is None or names.get(pid) == command:
            total += cpu.get(pid, 0.0)
        counted.extend(children.get(pid, []))
    return total
