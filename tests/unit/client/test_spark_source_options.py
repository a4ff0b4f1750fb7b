"""The streaming source's boundary checks and planning, without Spark's engine: its options as
Spark hands them over, the partitions a log's segments become, and how missing commits are named."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark", reason="the spark extra is part of `make install`")

from bkclient import IncorrectParameterError
from bkclient.spark_sink import SinkOptions
from bkclient.spark_source import EntryRange, SourceOptions, commit_ranges, plan_partitions
from bkmeta.named_log import LogSegment


def test_source_options_pass_through_the_sink_parser_case_insensitively() -> None:
    opts = SinkOptions.parse({"zkservers": "zk:1", "path": "events", "startingoffsets": "LATEST",
                              "failondataloss": "false", "maxentriespertrigger": "10",
                              "maxEntriesPerPartition": "7"})
    source = SourceOptions.parse(dict(opts.source))
    assert source == SourceOptions("latest", False, 10, None, 7)
    assert SourceOptions.parse({}) == SourceOptions()
    assert SourceOptions.parse({"startingOffsets": "12"}).starting == "12"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("startingOffsets", "newest", "earliest, latest or a commit number"),
    ("failOnDataLoss", "maybe", "true or false"),
    ("maxEntriesPerTrigger", "0", "at least 1"),
    ("maxBytesPerTrigger", "1MB", "must be an integer"),
])
def test_bad_source_options_are_refused_by_name(key: str, value: str, message: str) -> None:
    with pytest.raises(IncorrectParameterError, match=f"{key}.*{message}|{message}"):
        SourceOptions.parse({key: value})


def test_long_segments_split_into_equal_entry_ranges_in_log_order() -> None:
    a, b, empty = LogSegment(1, 10, 100, "w"), LogSegment(2, 3, 30, "w"), LogSegment(3, 0, 0, "w")
    parts = plan_partitions([a, empty, b], 4)
    assert [(p.segment.ledger_id, p.first, p.last) for p in parts] == [
        (1, 0, 2), (1, 3, 5), (1, 6, 9), (2, 0, 2)]
    assert [(p.first, p.last) for p in plan_partitions([LogSegment(4, 8, 80, "w")], 4)] == [(0, 3), (4, 7)]
    assert pickle.loads(pickle.dumps(parts[0])) == EntryRange(a, 0, 2)  # partitions travel pickled


def test_missing_commits_are_named_as_ranges() -> None:
    assert commit_ranges([4]) == "4"
    assert commit_ranges([1, 2, 3, 7, 9, 10]) == "1..3, 7, 9..10"
