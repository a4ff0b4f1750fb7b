"""Static checks of deploy/: no Docker engine runs here, so the compose file, the Dockerfile and the
Prometheus config are checked against the code they start — every command a container runs must
parse with the real ``pybk`` parser, every ``BK_*`` override must be a valid bookie configuration,
and Prometheus must scrape exactly the bookies' metrics ports."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from bookie.config import KEYS, load_config
from pybk.main import build_parser

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
REPO = DEPLOY.parent
BOOKIES = ["bookie-1", "bookie-2", "bookie-3"]


def load_yaml(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml("docker-compose.yml")


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def built_from_our_dockerfile(service: dict[str, Any]) -> bool:
    build = service.get("build")
    return isinstance(build, dict) and build.get("dockerfile") == "deploy/Dockerfile"


def pybk_args(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def parse_pybk(argv: list[str]) -> argparse.Namespace:
    """Parse like the container's ENTRYPOINT ["pybk"] would; argparse exits on an unknown flag."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # pragma: no cover - the assertion message is the point
        raise AssertionError(f"`pybk {shlex.join(argv)}` is rejected by pybk's parser") from exc


def option_value(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def test_compose_uses_current_spec_and_expected_services(compose: dict[str, Any]) -> None:
    assert "version" not in compose, "top-level version is obsolete in the compose spec"
    assert set(compose["services"]) == {"zookeeper", "init-cluster", *BOOKIES, "autorecovery", "prometheus"}


def test_zookeeper_is_39_with_a_healthcheck(services: dict[str, Any]) -> None:
    zk = services["zookeeper"]
    assert str(zk["image"]).startswith("zookeeper:3.9")
    test = zk["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1


def test_init_cluster_is_a_one_shot_initnewcluster_after_zookeeper_is_healthy(
    services: dict[str, Any],
) -> None:
    init = services["init-cluster"]
    assert built_from_our_dockerfile(init)
    argv = pybk_args(init)
    args = parse_pybk(argv)
    assert args.command == "shell"
    assert "initnewcluster" in argv
    assert option_value(argv, "--zk") == "zookeeper:2181"
    assert init["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    assert init.get("restart", "no") == "no"


def test_autorecovery_runs_on_the_cluster_with_valid_keys(services: dict[str, Any]) -> None:
    service = services["autorecovery"]
    assert built_from_our_dockerfile(service)
    argv = pybk_args(service)
    assert parse_pybk(argv).command == "autorecovery"
    assert option_value(argv, "--zk") == "zookeeper:2181"
    assert service["depends_on"]["init-cluster"]["condition"] == "service_completed_successfully"
    env = {str(k): str(v) for k, v in service["environment"].items()}
    assert load_config(None, env).autorecovery.lost_bookie_delay_s == 60


@pytest.mark.parametrize("name", BOOKIES)
def test_bookie_command_parses_and_waits_for_a_ready_cluster(services: dict[str, Any], name: str) -> None:
    bookie = services[name]
    assert built_from_our_dockerfile(bookie)
    argv = pybk_args(bookie)
    args = parse_pybk(argv)
    assert args.command == "bookie"
    assert option_value(argv, "--zk") == "zookeeper:2181"
    depends = bookie["depends_on"]
    assert depends["zookeeper"]["condition"] == "service_healthy"
    assert depends["init-cluster"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", BOOKIES)
def test_bookie_env_overrides_are_valid_bookkeeper_keys(services: dict[str, Any], name: str) -> None:
    env = {str(k): str(v) for k, v in services[name]["environment"].items()}
    keys = [k.removeprefix("BK_") for k in env if k.startswith("BK_")]
    assert keys, "bookies are configured through BK_* overrides"
    unknown = [k for k in keys if k not in KEYS]
    assert not unknown, f"unknown bookie keys in {name}: {unknown}"
    argv = pybk_args(services[name])
    config = load_config(environ=env, overrides={"bookiePort": option_value(argv, "--port")})
    # Other containers reach the bookie by its service name: the bookie id must use it.
    assert config.bookie_id == f"{name}:{option_value(argv, '--port')}"
    assert config.http_enabled
    volume_targets = [str(v).split(":")[1] for v in services[name]["volumes"]]
    for directory in (*config.journal_dirs, *config.ledger_dirs):
        assert any(str(directory).startswith(t) for t in volume_targets), f"{directory} not on a volume"


@pytest.mark.parametrize("name", BOOKIES)
def test_bookie_healthcheck_probes_its_own_readiness(services: dict[str, Any], name: str) -> None:
    bookie = services[name]
    http_port = option_value(pybk_args(bookie), "--http-port")
    test = bookie["healthcheck"]["test"]
    assert test[:3] == ["CMD", "curl", "-f"], "curl without -f passes on HTTP errors"
    assert test[3] == f"http://localhost:{http_port}/api/v1/bookie/is_ready"


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Any]) -> None:
    used = {
        str(v).split(":")[0]
        for svc in services.values()
        for v in svc.get("volumes", [])
        if not str(v).startswith((".", "/"))
    }
    assert used <= set(compose["volumes"])
    for name in BOOKIES:
        assert any(str(v).startswith(f"{name}-data:") for v in services[name]["volumes"])


def test_prometheus_scrapes_every_bookie_and_autorecovery(services: dict[str, Any]) -> None:
    prom = services["prometheus"]
    mounts = [str(v) for v in prom["volumes"]]
    config_mount = next(m for m in mounts if m.endswith(":/etc/prometheus/prometheus.yml:ro"))
    assert (DEPLOY / config_mount.split(":")[0]).resolve() == DEPLOY / "prometheus.yml"
    for name in BOOKIES:
        assert prom["depends_on"][name]["condition"] == "service_healthy"

    scrape = load_yaml("prometheus.yml")["scrape_configs"]
    targets = {t for job in scrape for sc in job["static_configs"] for t in sc["targets"]}
    paths = {job.get("metrics_path", "/metrics") for job in scrape}
    scraped = (*BOOKIES, "autorecovery")
    expected = {f"{name}:{option_value(pybk_args(services[name]), '--http-port')}" for name in scraped}
    assert targets == expected
    assert paths == {"/metrics"}


def test_dockerfile_installs_every_package_and_runs_pybk() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "pybk" in pyproject["project"]["scripts"]
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = set(re.findall(r"^COPY (\S+) ", text, flags=re.MULTILINE))
    for package in packages:
        top = package.split("/")[0]
        assert top in copied, f"Dockerfile does not copy {top}/ (needed for {package})"
    assert re.search(r'^ENTRYPOINT \["pybk"\]', text, flags=re.MULTILINE)
    assert re.search(r"apt-get install .*\bcurl\b", text), "healthchecks run curl inside the image"
    expose_lines = re.findall(r"^EXPOSE (.+)$", text, flags=re.MULTILINE)
    exposed = {int(port) for line in expose_lines for port in line.split()}
    compose = load_yaml("docker-compose.yml")
    for name in BOOKIES:
        argv = pybk_args(compose["services"][name])
        assert {int(option_value(argv, "--port")), int(option_value(argv, "--http-port"))} <= exposed


def test_the_files_the_dockerfile_copies_build_a_wheel_with_every_package(tmp_path: Path) -> None:
    """Rebuild the image's build context by hand (only what COPY brings in) and build the wheel
    there, as `RUN pip install .` does: a package or file missing from the COPY lines fails here."""
    text = (DEPLOY / "Dockerfile").read_text()
    context = tmp_path / "context"
    context.mkdir()
    for sources in re.findall(r"^COPY (.+) \S+$", text, flags=re.MULTILINE):
        for source in sources.split():
            origin = REPO / source
            if origin.is_dir():
                shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(origin, context / source)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheels"), str(context)],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheels").glob("bookkeeper_python-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "pybk = pybk.main:main" in archive.read(entry_points).decode()
    for package in ("bkproto", "bkmeta", "bookie", "autorecovery", "bkclient", "pybk"):
        assert f"{package}/__init__.py" in names
    assert "bkproto/v1/bookie_pb2.py" in names  # generated code ships in the image
