"""Free loopback ports for tests that start a whole cluster on fixed port ranges
(``pybk localcluster``, ``pybk verify``), and for a server that restarts on the same port."""

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
    """A free ZooKeeper port and a base port whose gRPC, HTTP and add port ranges are free, all
    below the OS's ephemeral range: these clusters restart their servers on the same ports
    (:func:`restartable_port` says why that range is no place for them)."""
    rng = random.Random()
    high = max(_below_ephemeral(), 30000) - 300  # the base's ranges reach base + 200 + bookies
    for _ in range(200):
        zk_port = rng.randrange(20000, 29000)
        base = rng.randrange(29000, high)
        wanted = [
            zk_port,
            base + 99,
            *(base + i for i in range(bookies)),
            *(base + 100 + i for i in range(bookies)),
            *(base + 200 + i for i in range(bookies)),
        ]
        if all(p not in _handed_out and port_is_free(p) for p in wanted):
            return zk_port, base
    raise RuntimeError("no free ports found")


def _below_ephemeral() -> int:
    """The end of the ports below the OS's ephemeral range (the lowest port it hands out to
    outgoing connections), and below Linux's default range whatever this host's says."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return min(int(f.read().split()[0]), 32768)
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def restartable_port() -> int:
    """A free loopback port below the OS's ephemeral range, for a server that stops and starts
    again on the same port. A port the OS picked (``bind(0)``) is an ephemeral one: while the
    server is down, any outgoing connection may be given it as its own port (a client retrying
    that very address can even connect to itself), and the restart then fails with "address
    already in use"."""
    rng = random.Random()
    high = _below_ephemeral()
    for _ in range(200):
        port = rng.randrange(10000, high)
        if port not in _handed_out and port_is_free(port):
            _handed_out.add(port)  # not twice in one run, bound or not yet
            return port
    raise RuntimeError("no free port found below the ephemeral range")


_handed_out: set[int] = set()
