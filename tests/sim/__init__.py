"""Deterministic simulation of a pybookkeeper cluster (issue 26).

The real client (``bkclient``) and the real bookie request handling (``bookie.handlers`` over
``bookie.bookie.Bookie``) run in one thread on a seeded event loop with virtual time, over a
simulated network, simulated disks and a simulated ZooKeeper. Workloads, a nemesis and named
invariant checkers run on top; every random choice comes from the seed, so a failing seed replays
exactly with ``python -m tests.sim run --seed N --steps K``.

Not collected by pytest on its own: ``tests/unit/test_simulation.py`` drives it.
"""
