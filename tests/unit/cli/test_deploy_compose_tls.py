"""Static checks of deploy/docker-compose.tls.yml (no Docker engine here): the `certs` service's
command parses and, run for real, writes every file the bookies, the healthchecks, the clients
and Prometheus are pointed at; the merged bookie environment is a valid TLS configuration."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from tests.support.compose_files import (
    COMPOSE_BOOKIES,
    DEPLOY,
    load_deploy_yaml,
    parse_pybk,
    service_pybk_args,
)

from bookie.config import load_config
from pybk.main import main

TLS_DIR = "/tls"


@pytest.fixture(scope="module")
def override() -> dict[str, Any]:
    return load_deploy_yaml("docker-compose.tls.yml")


@pytest.fixture(scope="module")
def made(override: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the `certs` service writes, made by running its command here."""
    argv = service_pybk_args(override["services"]["certs"])
    assert parse_pybk(argv).command == "certs"
    out = tmp_path_factory.mktemp("tls")
    assert main([str(out) if part == TLS_DIR else part for part in argv]) == 0
    return out


def local(value: str, made: Path) -> str:
    return value.replace(TLS_DIR, str(made), 1) if value.startswith(TLS_DIR + "/") else value


def test_certs_runs_once_before_the_cluster_in_the_tls_profile(override: dict[str, Any]) -> None:
    services = override["services"]
    assert services["certs"]["profiles"] == ["tls"]
    assert services["init-cluster"]["depends_on"]["certs"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", COMPOSE_BOOKIES)
def test_bookie_tls_environment_is_a_valid_configuration(
    override: dict[str, Any], made: Path, name: str
) -> None:
    base = load_deploy_yaml("docker-compose.yml")["services"][name]["environment"]
    merged = {**base, **override["services"][name]["environment"]}
    env = {str(k): local(str(v), made) for k, v in merged.items()}
    config = load_config(environ=env, overrides={"journalDirectories": "/j", "ledgerDirectories": "/l"})
    tls = config.security.tls
    assert tls is not None and tls.client_auth
    assert tls.trust_path is not None
    assert all(path.exists() for path in (tls.cert_path, tls.key_path, tls.trust_path))
    assert config.security.auth.providers == ("mtls",)


def test_every_file_pointed_at_is_made(override: dict[str, Any], made: Path) -> None:
    services = override["services"]
    words = [*shlex.split(services["bookie-1"]["healthcheck"]["test"][1]),
             *services["autorecovery"]["healthcheck"]["test"]]
    pointed = [str(word) for word in words if str(word).startswith(TLS_DIR)]
    pointed.append(services["init-cluster"]["environment"]["PYBK_CLIENT_CONF"])
    prometheus = yaml.safe_load((DEPLOY / "prometheus-tls.yml").read_text())
    for job in prometheus["scrape_configs"]:
        assert job["scheme"] == "https"
        pointed += list(job["tls_config"].values())
    assert len(pointed) >= 6
    for path in pointed:
        assert Path(local(path, made)).exists(), path
    client_conf = (made / "client.conf").read_text()
    assert all(Path(line.split("=", 1)[1]).exists() for line in client_conf.splitlines())


def test_the_bookie_certificate_names_the_address_bookies_advertise(made: Path) -> None:
    base = load_deploy_yaml("docker-compose.yml")["services"]
    advertised = {base[name]["environment"]["BK_advertisedAddress"] for name in COMPOSE_BOOKIES}
    cert = x509.load_pem_x509_certificate((made / "bookie.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert advertised <= {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
