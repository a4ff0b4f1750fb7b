"""``pybk localcluster``: a real ZooKeeper and N bookie processes on this machine, for development.

:mod:`.layout` decides directories, ports and commands; :mod:`.child` runs one process;
:mod:`.steps` talks to the cluster (metadata, registration, self-check); :mod:`.cluster` orders
start, watch and stop; :mod:`.banner` tells the user what runs and how to use it.
"""
