"""The add port's framing as the client writes it, and its sockets' keepalive (frames read back:
the bookie's ``tests/unit/server/test_add_port_reading.py``, the client's ``test_frame_reader.py``)."""

from __future__ import annotations

import socket

from bkproto.add_port import FRAME_HEADER, frame, keep_alive


def test_a_frame_is_its_length_then_its_message() -> None:
    assert frame(b"first") == FRAME_HEADER.pack(5) + b"first"
    assert frame(b"") == FRAME_HEADER.pack(0)


def test_keep_alive_is_set_on_the_socket() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        keep_alive(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
