"""Free loopback ports for tests that start a whole cluster on fixed port ranges
(``pybk localcluster``, ``pybk verify``)."""

from __future__ import annotations

import random
import socket


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_ports(bookies: int) -> tuple[int, int]:
    """A free ZooKeeper port and a base port whose gRPC, HTTP and add port ranges are free."""
    rng = random.Random()
    for _ in range(200):
        zk_port = rng.randrange(20000, 29000)
        base = rng.randrange(30000, 39000)
        wanted = [zk_port, base + 99, *(base + i for i in range(bookies)),
                  *(base + 100 + i for i in range(bookies)), *(base + 200 + i for i in range(bookies))]
        if all(port_is_free(p) for p in wanted):
            return zk_port, base
    raise RuntimeError("no free ports found")
