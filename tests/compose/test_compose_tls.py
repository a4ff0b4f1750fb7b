"""deploy/docker-compose.tls.yml for real (``--profile tls``): the ``certs`` service makes a
throw-away CA, every bookie and autorecovery serve mutual TLS with identities from client
certificates, and Prometheus scrapes over HTTPS. From the host, a client holding the cluster's
client certificate writes and reads; one without it gets through no bookie door. Run by
``make test-compose`` after the plaintext cluster's test (both use the same host ports)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tests.support.compose import TLS_OVERLAY, ComposeProject, running_cluster

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc

pytestmark = pytest.mark.compose

BOOKIES = ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]
ZK = "127.0.0.1:2181"
INFO = bookie_pb2.GetBookieInfoRequest()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComposeProject]:
    project = ComposeProject("pybk-compose-tls-test", overlays=[TLS_OVERLAY], profiles=["tls"])
    with running_cluster(project):
        yield project


@pytest.fixture(scope="module")
def tls_dir(cluster: ComposeProject, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's CA and client certificate, copied out as the overlay's comment says, with
    ``client.conf`` pointing at the copies."""
    directory = tmp_path_factory.mktemp("tls")
    cluster.copy_out("certs", "/tls", directory)
    conf = directory / "client.conf"
    conf.write_text(conf.read_text().replace("/tls/", f"{directory}/"))
    return directory


def test_a_client_with_the_cluster_certificate_writes_and_reads(tls_dir: Path) -> None:
    pybk = Path(sys.executable).with_name("pybk")
    done = subprocess.run(
        [str(pybk), "shell", "--zk", ZK, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "1000"],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "PYBK_CLIENT_CONF": str(tls_dir / "client.conf")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "read back and verified" in done.stdout


def test_without_the_client_certificate_no_bookie_door_opens(tls_dir: Path) -> None:
    ca = (tls_dir / "ca.pem").read_bytes()
    cert, key = (tls_dir / "client.pem").read_bytes(), (tls_dir / "client.key").read_bytes()
    for i in range(1, len(BOOKIES) + 1):
        grpc_address, http_port = f"127.0.0.1:318{i}", 3280 + i
        # gRPC: plaintext, and TLS trusting the CA without a certificate of one's own, both fail
        for credentials in (None, grpc.ssl_channel_credentials(root_certificates=ca)):
            with (
                grpc.secure_channel(grpc_address, credentials) if credentials is not None
                else grpc.insecure_channel(grpc_address)
            ) as channel:  # fmt: skip
                with pytest.raises(grpc.RpcError) as refused:
                    bookie_pb2_grpc.BookieStub(channel).GetBookieInfo(INFO, timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # ... and with the certificate it answers
        mutual = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        with grpc.secure_channel(grpc_address, mutual) as channel:
            info = bookie_pb2_grpc.BookieStub(channel).GetBookieInfo(INFO, timeout=10)
            assert info.status == bookie_pb2.EOK
        # HTTPS admin: refused without a client certificate
        context = ssl.create_default_context(cadata=ca.decode())
        url = f"https://127.0.0.1:{http_port}/api/v1/bookie/info"
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(url, timeout=10, context=context)


def test_prometheus_scrapes_every_target_over_https(cluster: ComposeProject) -> None:
    deadline = time.monotonic() + 90  # a scrape every 10 s
    while True:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=10) as response:
            targets = json.load(response)["data"]["activeTargets"]
        health = {t["scrapeUrl"]: t["health"] for t in targets}
        over_https = all(url.startswith("https:") for url in health)
        if len(health) == 5 and set(health.values()) == {"up"} and over_https:
            return
        assert time.monotonic() < deadline, f"Prometheus targets not all up over HTTPS: {health}"
        time.sleep(3)
