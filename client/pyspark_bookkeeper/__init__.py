"""Spark 4's data-source discovery: Spark imports every installed top-level module named
``pyspark_*`` and registers its ``DefaultSource``, so ``format("bookkeeper")`` works without
``spark.dataSource.register`` wherever pybookkeeper is installed with the ``spark`` extra."""

from __future__ import annotations

from bkclient.spark import BookKeeperDataSource as DefaultSource

__all__ = ["DefaultSource"]
