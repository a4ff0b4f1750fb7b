"""The poll-based kazoo handler reports readiness exactly like kazoo's own select."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from bkmeta.zk_handler import PollingThreadingHandler


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_idle_socket_times_out_empty(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    assert PollingThreadingHandler().select([a], [], [], 0.01) == ([], [], [])


def test_readable_after_peer_writes(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.sendall(b"x")
    assert PollingThreadingHandler().select([a], [], [], 1.0) == ([a], [], [])


def test_writable_socket_and_fd_numbers(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    assert PollingThreadingHandler().select([], [a], [], 1.0) == ([], [a], [])
    assert PollingThreadingHandler().select([], [a.fileno()], [], 1.0) == ([], [a.fileno()], [])


def test_readable_wins_over_writable_like_kazoo(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.sendall(b"x")
    assert PollingThreadingHandler().select([a], [a], [], 1.0) == ([a], [], [])


def test_closed_peer_is_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    assert PollingThreadingHandler().select([a], [], [], 1.0)[0] == [a]


def test_negative_timeout_rejected(pair: tuple[socket.socket, socket.socket]) -> None:
    with pytest.raises(ValueError):
        PollingThreadingHandler().select([pair[0]], [], [], -1)
