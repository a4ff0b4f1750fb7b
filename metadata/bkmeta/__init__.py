"""ZooKeeper metadata for pybookkeeper: layout, ledger manager, registration, embedded ZooKeeper."""
