"""``pybk bench bookie`` against a real bookie process: each wire (packed groups with count_ok, or
one AddRequest per add) over each transport (the add port, gRPC) adds every entry of its phases,
the bookie holds them afterwards, the report says which wire and transport ran; the add port is
found in the bookie's registration; TLS with a token works on both transports; and a combination
that cannot run says why."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from tests.support.bench_bookie import bench_bookie, stored_entry_ids, stored_header
from tests.support.bookies import BookieFactory, BookieProcess
from tests.support.security import TOKENS, SecurityMaterial

from bkmeta.metadata_client import MetadataClient

pytestmark = pytest.mark.integration

SIZE = 100
PHASES = ("--entries", "600", "--batch", "100", "--window", "300", "--latency-entries", "20",
          "--warmup", "50", "--size", str(SIZE))  # fmt: skip


@pytest.mark.parametrize("wire", ["packed", "per-add"])
@pytest.mark.parametrize("transport", ["add-port", "grpc"])
def test_each_wire_over_each_transport_adds_every_entry(
    bookie: BookieProcess, capsys: pytest.CaptureFixture[str], wire: str, transport: str
) -> None:
    where = ["--add-port", str(bookie.add_port)] if transport == "add-port" else []
    run = bench_bookie(capsys, "--bookie", bookie.address, *where, "--wire", wire, "--transport", transport,
                       *PHASES)
    assert run.exit_code == 0, run.stderr
    report = run.report
    assert report is not None
    target = f"127.0.0.1:{bookie.add_port}" if transport == "add-port" else bookie.address
    assert (report["wire"], report["transport"], report["target"]) == (wire, transport, target)
    assert (report["entries"], report["errors"], report["single_add_errors"]) == (600, 0, 0)
    assert report["latency_samples"] == 600
    warmup, throughput, latency = report["ledger_ids"]
    for ledger_id, count in ((warmup, 50), (throughput, 600), (latency, 20)):
        assert stored_entry_ids(bookie.address, ledger_id) == list(range(count))
    assert stored_header(bookie.address, throughput, 599) == (throughput, 599, 598, 600 * SIZE)


def test_auto_takes_the_add_port_when_known_and_grpc_otherwise(
    bookie: BookieProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    known = bench_bookie(capsys, "--bookie", bookie.address, "--add-port", str(bookie.add_port), *PHASES)
    assert known.exit_code == 0, known.stderr
    assert known.report is not None
    assert (known.report["wire"], known.report["transport"]) == ("packed", "add-port")
    unknown = bench_bookie(capsys, "--bookie", bookie.address, *PHASES)
    assert unknown.exit_code == 0, unknown.stderr
    assert unknown.report is not None
    assert (unknown.report["wire"], unknown.report["transport"]) == ("packed", "grpc")


def test_combinations_that_cannot_run_say_why(
    bookie: BookieProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    no_port = bench_bookie(capsys, "--bookie", bookie.address, "--transport", "add-port", *PHASES)
    assert no_port.exit_code == 2
    assert "--transport add-port needs the add port" in no_port.stderr
    unused = bench_bookie(capsys, "--bookie", bookie.address, "--transport", "grpc",
                          "--add-port", str(bookie.add_port), *PHASES)
    assert unused.exit_code == 2
    assert "--transport grpc does not use it" in unused.stderr
    # A port where nothing listens fails the bench rather than quietly going over gRPC.
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        closed = bench_bookie(capsys, "--bookie", bookie.address, "--add-port", str(port), *PHASES)
    assert closed.exit_code == 1 and closed.report is None
    assert f"add port 127.0.0.1:{port} unreachable" in closed.stderr
    # Nor does a port that speaks something else (the gRPC port) pass for the add port.
    other = bench_bookie(capsys, "--bookie", bookie.address, "--add-port", str(bookie.port), *PHASES)
    assert other.exit_code == 1 and other.report is None
    assert "is it the bookie's add port?" in other.stderr


async def test_the_add_port_is_found_in_the_bookies_registration(
    zk_hosts: str, bookie_factory: BookieFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts)
    run = await asyncio.to_thread(bench_bookie, capsys, "--bookie", bookie.address, "--zk", zk_hosts, *PHASES)
    assert run.exit_code == 0, run.stderr
    assert run.report is not None
    assert (run.report["transport"], run.report["target"]) == ("add-port", f"127.0.0.1:{bookie.add_port}")
    stranger = await asyncio.to_thread(
        bench_bookie, capsys, "--bookie", "127.0.0.1:1", "--zk", zk_hosts, *PHASES
    )
    assert stranger.exit_code == 2
    assert f"127.0.0.1:1 is not registered in ZooKeeper {zk_hosts}" in stranger.stderr


@pytest.mark.parametrize("transport", ["add-port", "grpc"])
def test_tls_with_a_token_on_either_transport(
    bookie_factory: BookieFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, transport: str,
) -> None:
    material = SecurityMaterial.create(tmp_path / "pki")
    bookie = bookie_factory(
        conf=material.bookie_conf(mtls=False), grpc_credentials=material.health_credentials()
    )
    where = ["--add-port", str(bookie.add_port)] if transport == "add-port" else []
    argv = ["--bookie", bookie.address, *where, "--transport", transport, *PHASES]
    monkeypatch.setenv("BK_clientTrustStore", str(material.ca))
    monkeypatch.setenv("BK_clientAuthToken", TOKENS["writer"])
    run = bench_bookie(capsys, *argv)
    assert run.exit_code == 0, run.stderr
    assert run.report is not None
    assert (run.report["transport"], run.report["entries"], run.report["errors"]) == (transport, 600, 0)
    reader = material.client_token("reader").grpc_credentials()
    assert stored_entry_ids(bookie.address, run.report["ledger_ids"][1], reader) == list(range(600))
    monkeypatch.setenv("BK_clientAuthToken", TOKENS["reader"])  # may read, not add
    refused = bench_bookie(capsys, *argv)
    assert refused.exit_code == 1, refused.stderr
    # the add port refuses each add (EUA answers), gRPC the stream (PERMISSION_DENIED)
    why = refused.report["first_error"] if refused.report is not None else refused.stderr
    assert "EUA: reader lacks the write right" in why
