"""``pybk verify``: inject faults into a real cluster and check that nothing acknowledged is lost.

The pieces, each small: :mod:`.history` (payloads that name their own position, and the
invoke/ok/fail/info records every process appends to its own file), :mod:`.worker` (the writer,
recoverer, tailer and logger processes, ``python -m pybk.verify.worker``), :mod:`.log_workload`
(named logs under the Spark sink's commit protocol, and their check), :mod:`.workers` (starting
and restarting those processes), :mod:`.proxy` (the TCP fault
proxy in front of every bookie and ZooKeeper link), :mod:`.cluster` (ZooKeeper, bookies and
workers as child processes, built on :mod:`pybk.localcluster`), :mod:`.nemesis` (the seeded fault
schedule), :mod:`.readback` (the final read of every ledger through a fresh client),
:mod:`.checker` (the invariants over the whole history), :mod:`.report` (summary, JSON, plot) and
:mod:`.run` (the order of it all). ``pybk.cmd_verify`` wires it into the CLI; ``docs/verify.md``
says what it does and what it found.
"""
