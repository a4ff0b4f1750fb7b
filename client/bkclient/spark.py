"""``format("bookkeeper")``: PySpark (4.0+) reads and writes of named logs.

    from bkclient.spark import BookKeeperDataSource
    spark.dataSource.register(BookKeeperDataSource)
    df.selectExpr("to_json(struct(*)) AS value").write.format("bookkeeper") \\
        .option("zkServers", "zk:2181").mode("append").save("events")
    spark.read.format("bookkeeper").option("zkServers", "zk:2181").load("events")
    stream.writeStream.format("bookkeeper").option("zkServers", "zk:2181") \\
        .option("checkpointLocation", "/chk").start("events")

Writes take a ``value`` column (binary, or string stored as UTF-8); each row becomes one entry,
each partition one ledger, and the job's ledgers join the log in partition order when Spark
commits the job (:mod:`bkclient.spark_sink`). ``mode("overwrite")`` replaces the log's segments
and deletes the old ledgers. Streaming micro-batches commit with their batch id as a transaction
version under an app id (``txnAppId``, by default the checkpoint location), so a batch that Spark
replays after a failure is not appended twice. Batch writes can do the same with ``txnAppId`` and
``txnVersion`` (Delta Lake's options for idempotent ``foreachBatch`` writes).

Reads give ``ledger_id``, ``entry_id`` and ``value`` (binary), one partition per segment (a long
segment split into entry ranges), in the log's order. ``spark.readStream.format("bookkeeper")``
streams a log commit by commit (:mod:`bkclient.spark_source`: offsets, ``startingOffsets``,
``failOnDataLoss``, rate limits).

Both directions go through Arrow: writers take the ``value`` column of each Arrow record batch
in one call to the client, readers yield record batches. Each Python worker keeps one client
(ZooKeeper session and bookie connections) for all the tasks it runs.

Executors need ``bkclient`` installed and Spark's Python data sources need ``pyarrow``; both come
with ``pip install 'pybookkeeper[spark]'``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from bkmeta.named_log import LogSegment
from bkproto.errors import IncorrectParameterError, UnexpectedConditionError

from .spark_sink import SinkOptions, abort_write, commit_write, new_write_id, write_partition_batches
from .spark_source import EntryRange, LogStreamReader, SourceOptions, entry_batches, plan_partitions

__all__ = ["BookKeeperDataSource", "SegmentWritten"]

READ_SCHEMA = "ledger_id long, entry_id long, value binary"


@dataclass
class SegmentWritten(WriterCommitMessage):  # type: ignore[misc]
    """What one write task tells the driver: its segment, or None if its partition was empty."""

    segment: LogSegment | None


class BookKeeperDataSource(DataSource):  # type: ignore[misc]
    """The ``bookkeeper`` format: named logs of a BookKeeper cluster."""

    @classmethod
    def name(cls) -> str:
        return "bookkeeper"

    def schema(self) -> str:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _LogReader(SinkOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogStreamReader(SinkOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = SinkOptions.parse(self.options)
        opts.check_batch()
        return _BatchWriter(opts, value_index(schema), overwrite, new_write_id())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = SinkOptions.parse(self.options)
        if opts.txn_version is not None:
            raise IncorrectParameterError(
                "option 'txnVersion' is for batch writes; a stream's versions are its batch ids"
            )
        app_id = opts.txn_app_id or (
            f"checkpoint:{opts.checkpoint_location}" if opts.checkpoint_location else None
        )
        if app_id is None:
            raise IncorrectParameterError(
                "a streaming write to a log needs option 'checkpointLocation' or 'txnAppId': its "
                "micro-batches commit once per (app id, batch id), so a replayed batch is not "
                "appended twice"
            )
        return _StreamWriter(opts, value_index(schema), app_id, overwrite)


def value_index(schema: StructType) -> int:
    """Position of the ``value`` column, which must be binary or string."""
    for i, field in enumerate(schema.fields):
        if field.name == "value":
            if not isinstance(field.dataType, (BinaryType, StringType)):
                raise IncorrectParameterError(
                    f"column 'value' is {field.dataType.simpleString()}; a log entry needs binary or "
                    "string (for example selectExpr(\"to_json(struct(*)) AS value\"))"
                )
            return i
    raise IncorrectParameterError(
        f"no 'value' column in {schema.simpleString()}; each row's 'value' (binary or string) "
        "becomes one entry (for example selectExpr(\"to_json(struct(*)) AS value\"))"
    )


def _value_batches(batches: Iterator[pa.RecordBatch], task: int) -> Iterator[list[bytes]]:
    """Each Arrow batch's ``value`` column as entry bytes (strings as their UTF-8 bytes: Arrow
    stores them so, the cast copies no text)."""
    rows = 0
    for batch in batches:
        column = batch.column(batch.schema.get_field_index("value"))
        if column.null_count:
            row = rows + column.to_pylist().index(None)
            raise IncorrectParameterError(
                f"partition {task}, row {row}: 'value' is null; an entry needs bytes"
            )
        rows += len(column)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.cast(pa.binary() if pa.types.is_string(column.type) else pa.large_binary())
        yield column.to_pylist()


def _task() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _segments(messages: list[WriterCommitMessage | None]) -> list[LogSegment | None]:
    """Each task's segment, in partition order (a failed task's message is None)."""
    return [m.segment if isinstance(m, SegmentWritten) else None for m in messages]


class _BatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: SinkOptions, index: int, overwrite: bool, write_id: str) -> None:
        self.opts = opts
        self.index = index
        self.overwrite = overwrite
        self.write_id = write_id

    def write(self, iterator: Iterator[Any]) -> SegmentWritten:
        task = _task()
        values = _value_batches(iterator, task)
        return SegmentWritten(write_partition_batches(self.opts, self.write_id, task, values))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(
            self.opts, self.write_id, _segments(messages), overwrite=self.overwrite, shared_client=True
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_write(self.opts, self.write_id, shared_client=True)


class _StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """One write id per micro-batch, so a batch's commit sweeps only that batch's leftovers.

    The id is derived from (app id, batch id), not drawn at random: Spark makes the writer more
    than once (the tasks' copy and the committing one differ), and a batch replayed after a
    crash then shares its id with the attempt that crashed, whose ledgers its commit sweeps."""

    def __init__(self, opts: SinkOptions, index: int, app_id: str, overwrite: bool) -> None:
        self.opts = opts
        self.index = index
        self.app_id = app_id
        self.overwrite = overwrite  # outputMode("complete"): each batch is the whole result
        self.base_id = hashlib.sha256(app_id.encode()).hexdigest()[:24]

    def _write_id(self, batch_id: int | str) -> str:
        return f"{self.base_id}-{batch_id}"

    def write(self, iterator: Iterator[Any]) -> SegmentWritten:
        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        if batch_id is None:
            raise UnexpectedConditionError("no micro-batch id in this streaming task's context")
        task = _task()
        values = _value_batches(iterator, task)
        segment = write_partition_batches(self.opts, self._write_id(batch_id), task, values)
        return SegmentWritten(segment)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        result = commit_write(
            self.opts, self._write_id(batchId), _segments(messages), overwrite=self.overwrite,
            txn=(self.app_id, batchId), shared_client=True,
        )
        if not result.committed and result.last_version is not None and batchId < result.last_version:
            # Not a replay (that has the last version itself): batch ids started again, which is
            # what a deleted and re-created checkpoint does. Refusing every batch up to the old
            # mark would drop them silently.
            raise IncorrectParameterError(
                f"log {self.opts.log!r} already holds batch {result.last_version} of app "
                f"{self.app_id!r}, and batch {batchId} came now: was the checkpoint reset? "
                "Give this query its own option 'txnAppId'"
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Reusable: the query stops, and when it is restarted it replays this batch with this
        # very write id (see the class docstring), which an abort marker would refuse forever.
        # A task of this attempt that registers its ledger after this sweep is swept by the
        # replay's commit instead (or by loggc if the query never comes back).
        abort_write(self.opts, self._write_id(batchId), shared_client=True, reusable=True)


class _LogReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.source = SourceOptions.parse(dict(opts.source))

    def partitions(self) -> list[EntryRange]:
        with self.opts.worker_client() as bk:
            segments = bk.logs(self.opts.logs_root).segments(self.opts.log)
        return plan_partitions(segments, self.source.max_entries_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, EntryRange):
            # Where partitions() found none (a log without entries yet, say, after a failed
            # first write), Spark still reads one placeholder InputPartition(None).
            return iter(())
        return entry_batches(self.opts, partition)
