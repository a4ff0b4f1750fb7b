"""Fixture ``spark`` (module scope): a real local Spark (``local[2]``: a JVM and Python workers
running this interpreter) with ``format("bookkeeper")`` registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from bkclient.spark import BookKeeperDataSource

    # Python workers must run this interpreter (the one with bkclient and pyarrow installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pybk-spark-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # Partitions exactly as each test asks (one ledger per partition is what is checked).
        .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(BookKeeperDataSource)
    try:
        yield session
    finally:
        session.stop()
