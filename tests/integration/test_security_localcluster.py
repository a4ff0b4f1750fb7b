"""``pybk localcluster --tls``: one flag gives a cluster whose every listener speaks TLS with
client certificates; the tools work through PYBK_CLIENT_CONF and fail without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.localcluster import BOOKIES, SHELL_TIMEOUT_S, LocalClusterRun, running
from tests.support.ports import pick_ports

from bkproto import security as wire

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterRun]:
    base = tmp_path_factory.mktemp("tls-localcluster")
    zk_port, base_port = pick_ports(BOOKIES)
    run = LocalClusterRun(base / "data", zk_port, base_port, base / "localcluster.out", extra_args=("--tls",))
    with running(run):  # the self-check (a replicated ledger written and read back) ran over TLS
        yield run


def simpletest(cluster: LocalClusterRun, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pybk", "shell", "--zk", cluster.zk_hosts,
            "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "20"]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S,
                          env=env, stdin=subprocess.DEVNULL)


def test_tools_need_the_client_configuration(tls_cluster: LocalClusterRun) -> None:
    client_conf = tls_cluster.data_dir / "tls" / "client.conf"
    assert f"export PYBK_CLIENT_CONF={client_conf}" in tls_cluster.output()
    plain_env = {k: v for k, v in os.environ.items() if k != "PYBK_CLIENT_CONF"}
    with_tls = simpletest(tls_cluster, {**plain_env, "PYBK_CLIENT_CONF": str(client_conf)})
    assert with_tls.returncode == 0, with_tls.stdout + with_tls.stderr
    without = simpletest(tls_cluster, plain_env)
    assert without.returncode != 0
    # and it says why, rather than that no bookie could be reached
    assert "accepts only TLS" in without.stdout + without.stderr, without.stdout + without.stderr


def test_metrics_are_served_over_tls_to_the_client_certificate(tls_cluster: LocalClusterRun) -> None:
    tls: Path = tls_cluster.data_dir / "tls"
    context = wire.client_ssl_context(tls / "ca.pem", tls / "client.pem", tls / "client.key")
    url = f"https://127.0.0.1:{tls_cluster.base_port + 100}/metrics"
    with urllib.request.urlopen(url, timeout=10, context=context) as reply:
        assert "bookkeeper_server_ADD_ENTRY_REQUEST" in reply.read().decode()
    with pytest.raises(OSError):  # plaintext HTTP gets no answer from a TLS port
        urllib.request.urlopen(f"http://127.0.0.1:{tls_cluster.base_port + 100}/metrics", timeout=10)


def test_tools_reaching_bookies_directly_use_tls_too(tls_cluster: LocalClusterRun) -> None:
    env = {**os.environ, "PYBK_CLIENT_CONF": str(tls_cluster.data_dir / "tls" / "client.conf")}
    base = [sys.executable, "-m", "pybk"]
    lastmark = subprocess.run([*base, "shell", "--zk", tls_cluster.zk_hosts, "--json", "lastmark"],
                              check=False, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S, env=env)
    assert lastmark.returncode == 0, lastmark.stdout + lastmark.stderr  # over HTTPS with the client cert
    bench = subprocess.run(
        [*base, "bench", "bookie", "--bookie", f"127.0.0.1:{tls_cluster.base_port}", "--entries", "2000",
         "--latency-entries", "50", "--warmup", "0", "--json"],
        check=False, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S, env=env,
    )
    assert bench.returncode == 0, bench.stdout + bench.stderr  # gRPC over TLS with the client cert
    # the add port, found in the bookie's registration, over TLS with the client cert
    over_add_port = [*base, "bench", "bookie", "--bookie", f"127.0.0.1:{tls_cluster.base_port}",
                     "--zk", tls_cluster.zk_hosts, "--entries", "2000", "--latency-entries", "50",
                     "--warmup", "0", "--json"]
    bench = subprocess.run(over_add_port, check=False, capture_output=True, text=True,
                           timeout=SHELL_TIMEOUT_S, env=env)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    report = json.loads(bench.stdout.strip().splitlines()[-1])
    assert (report["transport"], report["entries"], report["errors"]) == ("add-port", 2000, 0)
    plain_env = {k: v for k, v in os.environ.items() if k != "PYBK_CLIENT_CONF"}
    bench = subprocess.run(over_add_port, check=False, capture_output=True, text=True,
                           timeout=SHELL_TIMEOUT_S, env=plain_env)
    assert bench.returncode == 2 and "accepts only TLS" in bench.stderr, bench.stdout + bench.stderr
