"""deploy/prometheus/alerts.yml and deploy/grafana/execauth-dashboard.json: the rules pass
``promtool check rules`` and their unit tests (``promtool test rules``), every PromQL of
the dashboard parses, and every metric either names is one a real app exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "execauth-dashboard.json"
METRIC_NAME = re.compile(r"\bexecauth_[a-z0-9_]+\b")
# Grafana's variables, replaced by what they stand for so that promtool can parse the query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$org_id": ".*"}

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian's prometheus package; `make test` installs it)",
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return document


def dashboard_expressions() -> list[str]:
    return [
        target["expr"]
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def alert_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


@needs_promtool
def test_alert_rules_pass_promtool_check() -> None:
    checked = promtool("check", "rules", str(RULES), cwd=RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test() -> None:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert alerts - tested == set()


def test_the_dashboard_is_a_grafana_dashboard_with_queries() -> None:
    document = dashboard()
    assert document["uid"] == "execauth-overview"
    assert document["schemaVersion"] >= 36
    queried = [panel for panel in document["panels"] if panel.get("targets")]
    assert len(queried) >= 20
    for panel in queried:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses recording rules' expressions: one rule per dashboard query.
    rules = []
    for index, expression in enumerate(dashboard_expressions()):
        for variable, value in GRAFANA_VARIABLES.items():
            expression = expression.replace(variable, value)
        rules.append({"record": f"dashboard:query_{index}", "expr": expression})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = promtool("check", "rules", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def exported_series_names(exposition: str) -> set[str]:
    """Every series name the exposition's ``# TYPE`` lines promise, samples or not."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.M):
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


@pytest.mark.anyio
async def test_dashboard_and_alerts_name_only_exported_metrics(
    client: httpx.AsyncClient,
) -> None:
    scraped = await client.get("/metrics")
    assert scraped.status_code == 200
    exported = exported_series_names(scraped.text)
    named = {
        name
        for expression in dashboard_expressions() + alert_expressions()
        for name in METRIC_NAME.findall(expression)
    }
    assert named, "no execauth metric found in the dashboard or the rules"
    assert named - exported == set()
