"""Fixture: a real ZooKeeper server (pybk zookeeper) for integration tests."""
