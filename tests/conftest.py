"""Shared fixtures. Real-process fixtures live in tests/support and are loaded as plugins."""

# Imported here, at the shallow stack of collection, not first by hypothesis's own terminal-summary
# hook at the end of a run: there, pytest's assertion rewriting compiles hypothesis at a deep stack,
# where this CPython (3.11.7) failed with "SystemError: AST constructor recursion depth mismatch"
# after a run of 15 passing tests, turning it into an error.
import hypothesis  # noqa: F401

pytest_plugins = [
    "tests.support.zookeeper", "tests.support.bookies", "tests.support.security", "tests.support.event_loops",
]
