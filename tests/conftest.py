"""Shared fixtures. Real-process fixtures live in tests/support and are loaded as plugins."""

pytest_plugins = ["tests.support.zookeeper", "tests.support.bookies", "tests.support.security"]
