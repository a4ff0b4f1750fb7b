"""Fast static checks of deploy/, run without a Docker engine (``make test-compose`` runs the
cluster for real): every command a container runs parses with the real ``pybk`` parser, every
``BK_*`` override is a valid bookie configuration, and Prometheus scrapes exactly the bookies' and
autorecovery's metrics ports."""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests.support.compose_files import (
    COMPOSE_BOOKIES,
    DEPLOY,
    load_deploy_yaml,
    parse_pybk,
    service_pybk_args,
)

from bookie.config import KEYS, load_config

REPO = DEPLOY.parent
PYBK_SERVICES = ["init-cluster", *COMPOSE_BOOKIES, "autorecovery"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_deploy_yaml("docker-compose.yml")


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def option_value(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def test_compose_uses_current_spec_and_expected_services(compose: dict[str, Any]) -> None:
    assert "version" not in compose, "top-level version is obsolete in the compose spec"
    assert set(compose["services"]) == {"zookeeper", *PYBK_SERVICES, "prometheus", "grafana"}


def test_the_image_is_built_once_and_shared(services: dict[str, Any]) -> None:
    builders = [name for name, svc in services.items() if "build" in svc]
    assert builders == ["init-cluster"]
    assert services["init-cluster"]["build"]["dockerfile"] == "deploy/Dockerfile"
    for name in PYBK_SERVICES:
        assert services[name]["image"] == "pybookkeeper:dev"


def test_base_images_default_to_the_official_ones(services: dict[str, Any]) -> None:
    assert services["zookeeper"]["image"] == "${ZOOKEEPER_IMAGE:-zookeeper:3.9}"
    assert services["prometheus"]["image"].startswith("${PROMETHEUS_IMAGE:-prom/prometheus:")
    assert services["init-cluster"]["build"]["args"]["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-python:3.11-slim}"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in (DEPLOY / "Dockerfile").read_text()


def test_every_service_has_a_healthcheck_but_the_one_shot(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        if name == "init-cluster":
            assert svc.get("restart") == "no"
            continue
        test = svc["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


@pytest.mark.parametrize("name", PYBK_SERVICES)
def test_pybk_commands_parse_and_wait_for_zookeeper(services: dict[str, Any], name: str) -> None:
    svc = services[name]
    argv = service_pybk_args(svc)
    parse_pybk(argv)
    assert option_value(argv, "--zk") == "127.0.0.1:2181"
    assert svc["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    if name != "init-cluster":
        assert svc["depends_on"]["init-cluster"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", COMPOSE_BOOKIES)
def test_bookies_listen_on_loopback_and_advertise_what_the_host_reaches(
    services: dict[str, Any], name: str
) -> None:
    env = {str(k): str(v) for k, v in services[name]["environment"].items()}
    unknown = [k for k in (k.removeprefix("BK_") for k in env if k.startswith("BK_")) if k not in KEYS]
    assert not unknown, f"unknown bookie keys in {name}: {unknown}"
    argv = service_pybk_args(services[name])
    port = option_value(argv, "--port")
    config = load_config(environ=env, overrides={"bookiePort": port})
    assert services[name]["network_mode"] == "host"
    assert config.bookie_id == f"127.0.0.1:{port}"
    assert env["BK_bindAddress"] == "127.0.0.1" and config.http_enabled
    assert env["BK_httpServerPort"] == option_value(argv, "--http-port")
    volume_targets = [str(v).split(":")[1] for v in services[name]["volumes"]]
    for directory in (*config.journal_dirs, *config.ledger_dirs):
        assert any(str(directory).startswith(t) for t in volume_targets), f"{directory} not on a volume"


def test_ports_are_unique_across_services(services: dict[str, Any]) -> None:
    ports: list[str] = []
    for name in COMPOSE_BOOKIES:
        svc = services[name]
        argv = service_pybk_args(svc)
        ports += [option_value(argv, "--port"), option_value(argv, "--http-port"),
                  str(svc["environment"]["BK_bookieAddPort"])]
    ports.append(option_value(service_pybk_args(services["autorecovery"]), "--http-port"))
    assert len(ports) == len(set(ports))


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Any]) -> None:
    used = {
        str(v).split(":")[0]
        for svc in services.values()
        for v in svc.get("volumes", [])
        if not str(v).startswith((".", "/"))
    }
    assert used == set(compose["volumes"])
    assert any(str(v).endswith(":/prometheus") for v in services["prometheus"]["volumes"])


def test_prometheus_scrapes_every_bookie_and_autorecovery(services: dict[str, Any]) -> None:
    prom = services["prometheus"]
    mounts = [str(v) for v in prom["volumes"]]
    config_mount = next(m for m in mounts if m.endswith(":/etc/prometheus/prometheus.yml:ro"))
    assert (DEPLOY / config_mount.split(":")[0]).resolve() == DEPLOY / "prometheus.yml"
    for name in COMPOSE_BOOKIES:
        assert prom["depends_on"][name]["condition"] == "service_healthy"
    scrape = load_deploy_yaml("prometheus.yml")["scrape_configs"]
    targets = {t for job in scrape for sc in job["static_configs"] for t in sc["targets"]}
    expected = {f"127.0.0.1:{option_value(service_pybk_args(services[name]), '--http-port')}"
                for name in (*COMPOSE_BOOKIES, "autorecovery")}
    assert targets == expected


def test_the_image_installs_from_the_wheelhouse_only() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "--no-index --find-links /tmp/wheels 'bookkeeper-python[server]'" in text
    assert re.search(r'^ENTRYPOINT \["pybk"\]', text, flags=re.MULTILINE)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ignored[-2:] == ["*", "!deploy/wheels/"], "the build context must not carry .venv or data"


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(services: dict[str, Any]) -> None:
    assert services["grafana"]["profiles"] == ["grafana"], "no stand-in image: opt-in only"
    mounts = {m.split(":")[1]: (DEPLOY / m.split(":")[0]).resolve() for m in services["grafana"]["volumes"]
              if m.startswith("./")}
    provisioning = mounts["/etc/grafana/provisioning"]
    source = load_deploy_yaml(str(provisioning.relative_to(DEPLOY) / "datasources" / "prometheus.yml"))
    assert source["datasources"][0]["url"] == "http://127.0.0.1:9090"  # the compose Prometheus
    provider = load_deploy_yaml(str(provisioning.relative_to(DEPLOY) / "dashboards" / "pybookkeeper.yml"))
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert (mounts["/var/lib/grafana/dashboards"] / "pybookkeeper.json").is_file()
    rules_mount = next(m for m in services["prometheus"]["volumes"] if m.endswith("prometheus-rules.yml:ro"))
    assert load_deploy_yaml("prometheus.yml")["rule_files"] == [rules_mount.split(":")[1]]
