"""A bookie with TLS and authentication on refuses, on every listener (gRPC, add port, HTTP),
whoever proves no identity or lacks the right, with EUA, counts it, and serves an authorized
client end to end."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.support.bookies import BookieFactory, BookieProcess, entry_body
from tests.support.security import TOKENS, SecurityMaterial

from bkclient.bookie_client import BookieClient, BookieClientOptions
from bkclient.tls import ClientSecurity
from bkproto import security as wire
from bkproto.errors import BookieUnavailableError, UnauthorizedAccessError
from bkproto.errors import TimeoutError as RequestTimeoutError

pytestmark = pytest.mark.integration

KEY = b"k" * 20


@pytest.fixture
def material(tmp_path: Path) -> SecurityMaterial:
    return SecurityMaterial.create(tmp_path / "pki")


def client(
    bookie: BookieProcess, security: ClientSecurity | None, add_port: bool = True, reads: bool = False
) -> BookieClient:
    """``reads``: the client's ReadStream goes over the add port too."""
    options = BookieClientOptions(security=security, use_add_port=add_port)
    add = f"127.0.0.1:{bookie.add_port}" if add_port else None
    return BookieClient(bookie.address, bookie.address, options, add, add_port_reads=reads)


def http(bookie: BookieProcess, material: SecurityMaterial, method: str, path: str,
         token: str | None = None, cert: str | None = None, body: bytes | None = None) -> tuple[int, str]:
    files = material.clients[cert] if cert else None
    cert_path, key_path = (files.cert, files.key) if files else (None, None)
    context = wire.client_ssl_context(material.ca, cert_path, key_path)
    request = urllib.request.Request(f"https://127.0.0.1:{bookie.http_port}{path}", data=body, method=method)
    if token is not None:
        request.add_header("Authorization", wire.bearer(token))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def refused(bookie: BookieProcess, material: SecurityMaterial, listener: str, reason: str) -> float:
    _, text = http(bookie, material, "GET", "/metrics", token=TOKENS["admin"])
    pattern = rf'^bookkeeper_server_auth_refused_total\{{listener="{listener}",reason="{reason}"\}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def test_token_bookie_refuses_the_unauthenticated_and_the_unauthorized_on_every_listener(
    bookie_factory: BookieFactory, material: SecurityMaterial
) -> None:
    bookie = await asyncio.to_thread(
        bookie_factory, conf=material.bookie_conf(mtls=False), grpc_credentials=material.health_credentials()
    )
    writer = client(bookie, material.client_token("writer"))
    reader = client(bookie, material.client_token("reader"))
    nobody = client(bookie, material.anonymous())
    nobody_grpc = client(bookie, material.anonymous(), add_port=False)
    plaintext = client(bookie, None)
    try:
        # an authorized writer adds over the add port and reads back over gRPC
        await asyncio.gather(*(writer.add(7, e, KEY, entry_body(7, e, e - 1)) for e in range(5)))
        assert (await writer.read_entry(7, 4)).body == entry_body(7, 4, 3)
        # a reader reads, but may neither add nor fence
        assert (await reader.read_entry(7, 0)).body == entry_body(7, 0, -1)
        with pytest.raises(UnauthorizedAccessError):
            await reader.add(7, 5, KEY, entry_body(7, 5, 4))
        with pytest.raises(UnauthorizedAccessError):
            await reader.read_entry(7, -1, fence_master_key=KEY)
        # no identity: EUA on gRPC (unary and the add stream) and on the add port
        with pytest.raises(UnauthorizedAccessError):
            await nobody.read_entry(7, 0)
        with pytest.raises(UnauthorizedAccessError):
            await nobody.add(7, 5, KEY, entry_body(7, 5, 4))
        # The gRPC add stream is refused (EUA) before any of its messages is taken. grpc.aio loses
        # that status when the client's first write races the refusal (the write fails first and
        # the call's status becomes INTERNAL "Internal error from Core"): refused either way.
        with pytest.raises((UnauthorizedAccessError, BookieUnavailableError)) as stream_refused:
            await nobody_grpc.add(7, 5, KEY, entry_body(7, 5, 4))
        why = stream_refused.value
        assert isinstance(why, UnauthorizedAccessError) or "INTERNAL" in str(why)
        # plaintext does not even get to ask (unavailable, or on a busy box out of time first)
        with pytest.raises((BookieUnavailableError, RequestTimeoutError)):
            await plaintext.read_entry(7, 0, timeout=5)
        assert (await writer.read_entry(7, -1)).body == entry_body(7, 4, 3)  # nothing was added
    finally:
        for c in (writer, reader, nobody, nobody_grpc, plaintext):
            await c.close()

    # HTTP: no identity 401, a non-admin may look but not change, an admin may change
    assert (await asyncio.to_thread(http, bookie, material, "GET", "/heartbeat"))[0] == 401
    assert (await asyncio.to_thread(http, bookie, material, "GET", "/heartbeat", TOKENS["reader"]))[0] == 200
    body = json.dumps({"readOnly": True}).encode()
    status, _ = await asyncio.to_thread(
        http, bookie, material, "PUT", "/api/v1/bookie/state/readonly", TOKENS["writer"], None, body
    )
    assert status == 403
    status, text = await asyncio.to_thread(
        http, bookie, material, "PUT", "/api/v1/bookie/state/readonly", TOKENS["admin"], None, body
    )
    assert (status, json.loads(text)) == (200, {"readOnly": True})

    counts = {
        (listener, reason): await asyncio.to_thread(refused, bookie, material, listener, reason)
        for listener in ("grpc", "add", "http") for reason in ("unauthenticated", "unauthorized")
    }
    assert counts[("grpc", "unauthenticated")] >= 2
    assert counts[("add", "unauthenticated")] >= 1
    assert counts[("add", "unauthorized")] >= 1
    assert counts[("grpc", "unauthorized")] >= 1
    assert counts[("http", "unauthenticated")] == 1
    assert counts[("http", "unauthorized")] == 1


async def test_the_read_stream_over_the_add_port_serves_only_a_caller_with_the_read_right(
    bookie_factory: BookieFactory, material: SecurityMaterial
) -> None:
    bookie = await asyncio.to_thread(
        bookie_factory, conf=material.bookie_conf(mtls=False), grpc_credentials=material.health_credentials()
    )
    writer = client(bookie, material.client_token("writer"))
    reader = client(bookie, material.client_token("reader"), reads=True)
    nobody = client(bookie, material.anonymous(), reads=True)
    stranger = client(bookie, material.client_token("stranger"), reads=True)
    before = await asyncio.to_thread(refused, bookie, material, "read", "unauthenticated")
    try:
        await asyncio.gather(*(writer.add(8, e, KEY, entry_body(8, e, e - 1)) for e in range(3)))
        # a reader tails over the add port: entries 0 and 1 are confirmed (entry 2 carries LAC 1)
        poll = reader.standing_stride_poll(8, 0, 1, 2, 1 << 20, 10_000)
        answer = await asyncio.wait_for(poll.next(), 10)
        assert answer.bodies == [entry_body(8, 0, -1), entry_body(8, 1, 0)]
        assert not answer.more
        # a catch-up read's chunk goes the same way
        assert await reader.read_entries(8, 0, 10, 1 << 20) == [entry_body(8, e, e - 1) for e in range(3)]
        for outsider in (nobody, stranger):  # no token, and a token the bookie does not know
            refused_poll = outsider.standing_stride_poll(8, 0, 1, 2, 1 << 20, 10_000)
            with pytest.raises(UnauthorizedAccessError, match="EUA: authentication required"):
                await asyncio.wait_for(refused_poll.next(), 10)
            with pytest.raises(UnauthorizedAccessError, match="EUA: authentication required"):
                await outsider.read_entries(8, 0, 10, 1 << 20)
    finally:
        for c in (writer, reader, nobody, stranger):
            await c.close()
    # counted under the add port's read streams (once per connection): they went nowhere near gRPC
    assert await asyncio.to_thread(refused, bookie, material, "read", "unauthenticated") == before + 2


async def test_mtls_bookie_takes_identity_from_the_client_certificate(
    bookie_factory: BookieFactory, material: SecurityMaterial
) -> None:
    bookie = await asyncio.to_thread(
        bookie_factory, conf=material.bookie_conf(tokens=False),
        grpc_credentials=material.health_credentials(),
    )
    writer = client(bookie, material.client("writer"))
    stranger = client(bookie, material.client("stranger"))
    no_cert = client(bookie, material.anonymous())
    try:
        await asyncio.gather(*(writer.add(3, e, KEY, entry_body(3, e, e - 1)) for e in range(3)))
        assert (await writer.read_entry(3, 2)).body == entry_body(3, 2, 1)
        with pytest.raises(UnauthorizedAccessError):  # a valid certificate, but no rights
            await stranger.read_entry(3, 0)
        with pytest.raises(UnauthorizedAccessError):
            await stranger.add(3, 3, KEY, entry_body(3, 3, 2))
        with pytest.raises((BookieUnavailableError, RequestTimeoutError)):  # no certificate: no handshake
            await no_cert.read_entry(3, 0, timeout=5)
    finally:
        for c in (writer, stranger, no_cert):
            await c.close()
    assert (await asyncio.to_thread(http, bookie, material, "GET", "/heartbeat", None, "writer"))[0] == 200
    assert (await asyncio.to_thread(http, bookie, material, "GET", "/heartbeat", None, "stranger"))[0] == 403


async def test_only_a_writer_can_make_a_bookie_hold_a_ledger_by_fencing(
    bookie_factory: BookieFactory, material: SecurityMaterial, tmp_path: Path
) -> None:
    rights = tmp_path / "fence-rights"
    rights.write_text("writer=read,write,fence\nreader=read,fence\n")
    conf = {**material.bookie_conf(mtls=False), "bookieAuthorizationFile": str(rights)}
    credentials = material.health_credentials()
    bookie = await asyncio.to_thread(bookie_factory, conf=conf, grpc_credentials=credentials)
    writer = client(bookie, material.client_token("writer"))
    fencer = client(bookie, material.client_token("reader"))
    try:
        with pytest.raises(UnauthorizedAccessError):  # ledger 9 is not here: no squatting on it
            await fencer.read_entry(9, -1, fence_master_key=KEY)
        await writer.add(9, 0, KEY, entry_body(9, 0))
        # on a ledger the bookie holds, the fence right is enough
        assert (await fencer.read_entry(9, -1, fence_master_key=KEY)).body == entry_body(9, 0)
    finally:
        await writer.close()
        await fencer.close()


async def handshakes(bookie: BookieProcess, security: ClientSecurity) -> dict[str, bool]:
    """Whether a fresh connection of each listener completes with ``security``'s trust."""
    results: dict[str, bool] = {}
    for name, port in (("grpc", bookie.port), ("add", bookie.add_port), ("http", bookie.http_port)):
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=security.ssl_context), 10
            )
        except (OSError, TimeoutError):
            results[name] = False
            continue
        writer.close()
        results[name] = True
    return results


async def test_renewed_certificates_are_served_without_a_restart(
    bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    old = SecurityMaterial.create(tmp_path / "old")
    new = SecurityMaterial.create(tmp_path / "new")  # another CA: only a reload makes it pass
    conf = {**old.bookie_conf(mtls=False, auth=False), "tlsCertFilesRefreshDurationSeconds": "1"}
    bookie = await asyncio.to_thread(bookie_factory, conf=conf, grpc_credentials=old.health_credentials())
    assert await handshakes(bookie, old.anonymous()) == {"grpc": True, "add": True, "http": True}
    assert await handshakes(bookie, new.anonymous()) == {"grpc": False, "add": False, "http": False}

    pid = bookie.pid
    for renewed, current in ((new.bookie.key, old.bookie.key), (new.bookie.cert, old.bookie.cert)):
        current.write_bytes(renewed.read_bytes())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while (seen := await handshakes(bookie, new.anonymous())) != {"grpc": True, "add": True, "http": True}:
        assert loop.time() < deadline, f"renewed certificate not served: {seen}"
        await asyncio.sleep(0.5)
    assert bookie.pid == pid  # the same process
    renewed = client(bookie, new.anonymous())
    try:
        await renewed.add(1, 0, KEY, entry_body(1, 0))
        assert (await renewed.read_entry(1, 0)).body == entry_body(1, 0)
    finally:
        await renewed.close()
