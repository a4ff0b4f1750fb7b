"""``spark.readStream.format("bookkeeper")``: a named log as a Structured Streaming source.

Offsets are the log's commit numbers: ``{"commit": n}`` means every commit numbered below ``n``
has been read. A log numbers its commits without gaps (:mod:`bkmeta.named_log`), and a commit
is immutable once made, so an offset names the same entries for ever, and a micro-batch
replayed from a checkpoint reads what it read before. A number in a batch's range that no
commit carries was removed (truncated by retention, or replaced by an overwrite): that is data
loss, which fails the query unless ``failOnDataLoss`` is ``false`` (Kafka's source does the
same).

Options (besides the sink's ``zkServers``, ``log``, security files):

- ``startingOffsets``: ``earliest`` (default: the oldest commit still in the log), ``latest``
  (only commits made after the query starts) or a commit number. Used only when the query has
  no checkpoint yet.
- ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger``: a micro-batch takes whole commits until
  the next would pass the limit (at least one commit, so a large commit is never stuck).
- ``maxEntriesPerPartition``: a segment longer than this is read by several tasks, each an entry
  range of it (default 100,000).

Batch and streaming reads share the partitions and the reading: each task yields Arrow record
batches (``ledger_id``, ``entry_id``, ``value``), not one Python tuple per entry.
"""

from __future__ import annotations

import array
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from bkmeta.named_log import LogCommit, LogSegment
from bkproto.errors import IncorrectParameterError, NoSuchLedgerError, UnexpectedConditionError

from .spark_sink import SinkOptions
from .spark_sink import _int as int_option

if TYPE_CHECKING:
    from .sync import BookKeeper

__all__ = ["EntryRange", "LogStreamReader", "SourceOptions", "entry_batches", "plan_partitions"]

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema([("ledger_id", pa.int64()), ("entry_id", pa.int64()), ("value", pa.binary())])
ARROW_BATCH_ENTRIES = 4096  # rows per record batch a read task yields


@dataclass(frozen=True)
class SourceOptions:
    starting: str = "earliest"  # earliest | latest | a commit number (as text)
    fail_on_data_loss: bool = True
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    max_entries_per_partition: int = 100_000

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Strict, as the sink's options: a bad value is an error naming the option."""
        starting = raw.get("startingOffsets", "earliest").strip().lower()
        if starting not in ("earliest", "latest") and not (starting.isdigit()):
            raise IncorrectParameterError(
                f"option 'startingOffsets' must be earliest, latest or a commit number, got {starting!r}"
            )
        loss = raw.get("failOnDataLoss", "true").strip().lower()
        if loss not in ("true", "false"):
            raise IncorrectParameterError(f"option 'failOnDataLoss' must be true or false, got {loss!r}")
        return cls(
            starting=starting,
            fail_on_data_loss=loss == "true",
            max_entries_per_trigger=_positive(raw, "maxEntriesPerTrigger"),
            max_bytes_per_trigger=_positive(raw, "maxBytesPerTrigger"),
            max_entries_per_partition=_positive(raw, "maxEntriesPerPartition") or 100_000,
        )


def _positive(raw: Mapping[str, str], key: str) -> int | None:
    """An optional integer option of at least 1 (checked as the sink checks its own)."""
    return int_option(raw, key, 1) if key in raw else None


@dataclass(frozen=True)
class EntryRange(InputPartition):  # type: ignore[misc]
    """Entries ``first .. last`` of one segment: what one read task reads."""

    segment: LogSegment
    first: int
    last: int


def plan_partitions(segments: Sequence[LogSegment], max_entries: int) -> list[EntryRange]:
    """One partition per segment, a long segment cut into the fewest ranges of at most
    ``max_entries``, of equal length (give or take an entry: tasks of one size keep Spark's
    cores busy to the end, where a short remainder would run as a task of its own), in the
    log's order (Spark keeps partition order within a batch)."""
    ranges = []
    for seg in segments:
        parts = -(-seg.entries // max_entries)
        for k in range(parts):
            first, end = seg.entries * k // parts, seg.entries * (k + 1) // parts
            ranges.append(EntryRange(seg, first, end - 1))
    return ranges


def entry_batches(opts: SinkOptions, part: EntryRange) -> Iterator[pa.RecordBatch]:
    """A partition's entries as Arrow record batches, through this worker's shared client.

    The client hands the entries over in lists, as the bookies' answers bring them (one trip to
    its loop thread per list, not per entry); the ids of a segment's entries are consecutive, so
    the id columns are built whole rather than from a Python int per row."""
    ledger_id = part.segment.ledger_id
    with opts.worker_client() as bk:
        lists = bk.logs(opts.logs_root).read_segment_batches(
            part.segment, opts.segment.password, part.first, part.last
        )
        values: list[bytes] = []
        first_id = next_id = part.first
        for entries in lists:
            if entries[0].entry_id != next_id:
                raise UnexpectedConditionError(
                    f"ledger {ledger_id}: the read gave entry {entries[0].entry_id} where "
                    f"{next_id} was due"
                )
            values += [entry.data for entry in entries]
            next_id += len(entries)
            if len(values) >= ARROW_BATCH_ENTRIES:
                yield _batch(ledger_id, first_id, values)
                values, first_id = [], next_id
        if values:
            yield _batch(ledger_id, first_id, values)


def _batch(ledger_id: int, first_id: int, values: list[bytes]) -> pa.RecordBatch:
    """Rows ``first_id``, ``first_id + 1``, ... of ledger ``ledger_id`` holding ``values``."""
    count = len(values)
    entry_ids = pa.Array.from_buffers(
        pa.int64(), count, [None, pa.py_buffer(array.array("q", range(first_id, first_id + count)))]
    )
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(ledger_id, pa.int64()), count), entry_ids, pa.array(values, pa.binary())],
        schema=ARROW_SCHEMA,
    )


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """The driver's side of a streaming read: offsets, limits, partitions (see the module)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.source = SourceOptions.parse(dict(opts.source))
        self._bk: BookKeeper | None = None  # the driver's client, kept across micro-batches
        self._target: int | None = None  # trigger(availableNow=True): the head when it began

    def prepareForTriggerAvailableNow(self) -> None:
        """Read up to the log's head as it is now, in micro-batches the rate limits allow."""
        self._target = self._next_seq()

    def _client(self) -> BookKeeper:
        if self._bk is None:
            self._bk = self.opts.client()
        return self._bk

    def _next_seq(self) -> int:
        return self._client().logs(self.opts.logs_root).next_seq(self.opts.log)

    def _commits(self) -> list[LogCommit]:
        """The log's commits; none while the log does not exist yet (a stream may start first)."""
        return self._client().logs(self.opts.logs_root).commits(self.opts.log) if self._next_seq() > 0 else []

    def initialOffset(self) -> dict[str, int]:
        starting = self.source.starting
        if starting.isdigit():
            return {"commit": int(starting)}
        if starting == "latest":
            return {"commit": self._next_seq()}
        commits = self._commits()
        return {"commit": commits[0].seq if commits else 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_entries_per_trigger is not None:
            return ReadMaxRows(self.source.max_entries_per_trigger)
        if self.source.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.source.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """The log's head, or with a limit the end of the whole commits it allows from ``start``."""
        commits = self._commits()
        head = commits[-1].seq + 1 if commits else self._next_seq()
        if self._target is not None:
            head = min(head, self._target)
            commits = [c for c in commits if c.seq < head]
        if start is None or limit is None or isinstance(limit, ReadAllAvailable):
            return {"commit": max(head, start["commit"] if start else 0)}
        first = int(start["commit"])
        end = first
        entries = size = 0
        for commit in commits:
            if commit.seq < first:
                continue
            entries += sum(seg.entries for seg in commit.segments)
            size += sum(seg.length for seg in commit.segments)
            over = (isinstance(limit, ReadMaxRows) and entries > limit.max_rows) or (
                isinstance(limit, ReadMaxBytes) and size > limit.max_bytes
            )
            if over and end > first:
                break  # whole commits only, and at least one
            end = commit.seq + 1
        return {"commit": max(end, first)}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"commit": self._next_seq()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[EntryRange]:
        first, stop = int(start["commit"]), int(end["commit"])
        if stop <= first:
            return []
        commits = [c for c in self._commits() if first <= c.seq < stop]
        missing = sorted(set(range(first, stop)) - {c.seq for c in commits})
        if missing:
            what = (
                f"log {self.opts.log!r}: commits {commit_ranges(missing)} of this micro-batch's "
                f"{first}..{stop - 1} are gone (truncated by retention or replaced by an "
                "overwrite) before this query read them"
            )
            if self.source.fail_on_data_loss:
                raise NoSuchLedgerError(
                    what + "; set option 'failOnDataLoss' to false to skip them and go on"
                )
            log.warning("%s; skipped (failOnDataLoss=false)", what)
        segments = [seg for c in commits for seg in c.segments if seg.entries > 0]
        return plan_partitions(segments, self.source.max_entries_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EntryRange)
        return entry_batches(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to record: the log keeps every commit until retention removes it, and the
        query's checkpoint holds its offsets."""

    def stop(self) -> None:
        if self._bk is not None:
            self._bk.close()
            self._bk = None


def commit_ranges(numbers: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1..3, 7``."""
    parts: list[str] = []
    run_start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(run_start) if run_start == prev else f"{run_start}..{prev}")
        if n is not None:
            run_start = prev = n
    return ", ".join(parts)
