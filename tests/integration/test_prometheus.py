"""A real Prometheus scrapes a real ``pybk localcluster`` (two bookies and autorecovery): every
target is up, and after a short write/read load every expression of the example rules in
``deploy/prometheus-rules.yml`` (written against BookKeeper's metric names and shapes) returns
data, as do the series those rules record and every query of the Grafana dashboard in
``deploy/grafana``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.localcluster import BOOKIES, LocalClusterRun, running, shell
from tests.support.ports import pick_ports
from tests.support.prometheus import Prometheus, prometheus_server

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "pybookkeeper.json"
WAIT_S = 90.0  # a guard against hangs: scrapes and rule evaluations run every second


def recording_rules() -> dict[str, str]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"]: rule["expr"] for group in groups for rule in group["rules"] if "record" in rule}


def dashboard_expressions() -> list[str]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


@pytest.fixture(scope="module")
def scraped_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalClusterRun, Prometheus]]:
    base = tmp_path_factory.mktemp("prometheus")
    zk_port, base_port = pick_ports(BOOKIES)
    with running(LocalClusterRun(base / "data", zk_port, base_port, base / "localcluster.out")) as run:
        jobs = {
            "bookies": [f"127.0.0.1:{base_port + 100 + i}" for i in range(BOOKIES)],
            "autorecovery": [f"127.0.0.1:{base_port + 99}"],
        }
        with prometheus_server(base / "prometheus", jobs, [RULES]) as prometheus:
            yield run, prometheus


def eventually(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: nothing after {WAIT_S} s")
        time.sleep(0.5)


def test_every_target_is_up(scraped_cluster: tuple[LocalClusterRun, Prometheus]) -> None:
    _, prometheus = scraped_cluster

    def all_up() -> list[dict[str, Any]] | None:
        targets = prometheus.targets()
        return targets if len(targets) == BOOKIES + 1 and all(t["health"] == "up" for t in targets) else None

    targets = eventually("every target up", all_up)
    assert sorted(t["labels"]["job"] for t in targets) == ["autorecovery"] + ["bookies"] * BOOKIES


def test_every_rule_expression_returns_data_after_a_load(
    scraped_cluster: tuple[LocalClusterRun, Prometheus],
) -> None:
    cluster, prometheus = scraped_cluster
    for _ in range(3):  # writes and reads on both bookies
        result = shell(cluster.zk_hosts, "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "200")
        assert result["ledger_id"] >= 0
    rules = recording_rules()
    assert len(rules) >= 8
    for record, expr in rules.items():
        samples = eventually(expr, lambda expr=expr: prometheus.query(expr))
        if "bookkeeper_server" in expr or "JOURNAL" in expr:  # the load reached both bookies
            assert len(samples) == BOOKIES, (expr, samples)
        eventually(record, lambda record=record: prometheus.query(record))
    adds = prometheus.query('sum(bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"})')
    assert float(adds[0]["value"][1]) >= 3 * 200


def test_every_dashboard_query_returns_data(scraped_cluster: tuple[LocalClusterRun, Prometheus]) -> None:
    cluster, prometheus = scraped_cluster
    shell(cluster.zk_hosts, "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "200")
    expressions = dashboard_expressions()
    assert len(expressions) >= 15
    for expr in expressions:
        eventually(expr, lambda expr=expr: prometheus.query(expr))
