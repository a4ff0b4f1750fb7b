"""The ``pybk`` command line: bookie, zookeeper, localcluster, shell and bench."""
