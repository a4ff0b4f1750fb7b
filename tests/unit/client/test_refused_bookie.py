"""A bookie registered as TLS-only, seen by a client without TLS: the registration carries the
fact (BookKeeper's ``auth: "tls"`` on the endpoints) and the connection refuses every call with an
error that says what to configure."""

from __future__ import annotations

import pytest

from bkclient.bookie_client import BookieClient, grpc_connector
from bkclient.refused_bookie import RefusedBookie
from bkclient.transport import BookieAddress
from bkmeta.registration import BookieServiceInfo
from bkproto.errors import BKError, UnauthorizedAccessError


def test_a_tls_bookie_says_so_in_its_registration() -> None:
    info = BookieServiceInfo("10.0.0.1:3181", "10.0.0.1", 3181, "10.0.0.1", 8080, add_port=3381, tls=True)
    decoded = BookieServiceInfo.from_bytes(info.bookie_id, info.to_bytes())
    assert decoded.tls and decoded.add_port == 3381
    plain = BookieServiceInfo("10.0.0.1:3181", "10.0.0.1", 3181)
    assert not BookieServiceInfo.from_bytes(plain.bookie_id, plain.to_bytes()).tls


class Listener:
    def __init__(self) -> None:
        self.completions: list[tuple[str, int, BKError | None]] = []

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        self.completions.append((bookie_id, token, error))


async def test_a_client_without_tls_is_told_instead_of_connecting() -> None:
    connection = grpc_connector()("10.0.0.1:3181", BookieAddress("10.0.0.1:3181", None, tls=True))
    assert isinstance(connection, RefusedBookie)
    listener = Listener()
    connection.add_encoded(b"", listener, 7)
    [(bookie_id, token, error)] = listener.completions
    assert (bookie_id, token) == ("10.0.0.1:3181", 7)
    assert isinstance(error, UnauthorizedAccessError) and "accepts only TLS" in str(error)
    with pytest.raises(UnauthorizedAccessError, match="clientTrustStore"):
        await connection.read_entry(1, 0)
    await connection.close()


async def test_a_plaintext_bookie_gets_a_real_connection() -> None:
    connection = grpc_connector()("127.0.0.1:1", BookieAddress("127.0.0.1:1"))
    assert isinstance(connection, BookieClient)
    await connection.close()
