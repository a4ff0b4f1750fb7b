"""Fixture: a real ZooKeeper server (``pybk zookeeper``'s launcher) for integration tests.

Stable contract (engineers B, D, E rely on it):

* ``zk_server`` (session scope): one real ZooKeeper JVM on a free loopback port. ``.hosts`` is
  ``"127.0.0.1:PORT"``; ``.stop()``/``.kill()`` exist but do not use them on the shared server
  (start your own :class:`bkmeta.zookeeper_server.ZooKeeperServer` for ZooKeeper-down tests).
* ``zk_hosts`` (function scope): ``"127.0.0.1:PORT/t-<uuid>"``, a connect string chrooted to a fresh
  znode, so every test sees an empty ZooKeeper (the kazoo test-harness idea).
* ``expire_session(hosts, client_id)`` / ``expire_kazoo_session(client)``: force a session expiry
  (``LOST``) by connecting a second client with the same session id and password and closing it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError, NotEmptyError

from bkmeta.zookeeper_server import ZooKeeperConfig, ZooKeeperServer, free_port


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    data_dir: Path = tmp_path_factory.mktemp("zookeeper")
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=data_dir, port=free_port()))
    log_file = (data_dir / "zookeeper.log").open("wb")
    server.start(stdout=log_file.fileno(), stderr=log_file.fileno())
    try:
        try:
            server.wait_ready()
        except Exception as e:
            log_file.flush()
            tail = (data_dir / "zookeeper.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"test ZooKeeper did not start: {e}\n{tail}") from e
        yield server
    finally:
        server.stop()
        log_file.close()


@pytest.fixture
def zk_hosts(zk_server: ZooKeeperServer) -> Iterator[str]:
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zk_server.hosts, timeout=10.0)
    admin.start(timeout=15)
    try:
        admin.create(chroot)
        yield zk_server.hosts + chroot
        # Best effort: a test's still-open session may be re-creating ephemerals under the chroot.
        # A leftover chroot is harmless (names are unique), so never fail a test over it.
        for _ in range(3):
            try:
                admin.delete(chroot, recursive=True)
                break
            except (NotEmptyError, NoNodeError):
                time.sleep(0.2)
    finally:
        admin.stop()
        admin.close()


def expire_session(hosts: str, client_id: tuple[int, bytes], timeout_s: float = 10.0) -> None:
    """Expire the ZooKeeper session ``client_id`` (session id, password) on the server at ``hosts``."""
    other = KazooClient(hosts=hosts.split("/", 1)[0], client_id=client_id, timeout=timeout_s)
    other.start(timeout=timeout_s)
    other.stop()
    other.close()


def expire_kazoo_session(client: KazooClient, timeout_s: float = 20.0) -> None:
    """Expire ``client``'s session and wait until it saw ``LOST`` and reconnected with a new session."""
    lost = threading.Event()
    reconnected = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            reconnected.set()
            return True  # remove this listener
        return False

    client.add_listener(listener)
    old_session = client.client_id
    assert old_session is not None
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    expire_session(hosts, old_session)
    if not lost.wait(timeout_s):
        raise AssertionError("session did not expire")
    if not reconnected.wait(timeout_s):
        raise AssertionError("client did not reconnect after session expiry")
    assert client.client_id != old_session
