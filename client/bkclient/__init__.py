"""The pybookkeeper client library."""
