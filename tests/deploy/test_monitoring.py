"""The Prometheus alert rules and the Grafana dashboard in ``deploy/`` watch what the product
really serves.

Every expression is parsed by a real PromQL parser (promql-parser), and each of its selectors
must name a series of the product's own metric registry (``sre_diag.slack.metrics.Metrics``),
with labels that series carries and values the product emits: renaming a metric, a label or a
reason in the code fails here. The rules file is read by a strict model of Prometheus' rule
format; where ``promtool`` is installed (Debian's ``prometheus`` package), ``promtool check
rules`` and the unit tests in ``alerts_test.yaml`` run too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tests.deploy.support import DEPLOY, MetricCatalog, Selector, selectors

RULES = DEPLOY / "prometheus/alerts.yaml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yaml")
DASHBOARD = DEPLOY / "grafana/sre-diag.json"
CATALOG = MetricCatalog.of_the_product()

Duration = Annotated[str, StringConstraints(pattern=r"^([0-9]+[smhdwy])+$")]
Text = Annotated[str, StringConstraints(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Annotations(_Strict):
    summary: Text
    description: Text
    runbook_url: Annotated[str, StringConstraints(pattern=r"^https://")]


class _Labels(_Strict):
    severity: Literal["warning", "critical"]


class _AlertRule(_Strict):
    """Prometheus' alerting rule (rulefmt), with what every rule here must also carry."""

    alert: Annotated[str, StringConstraints(pattern=r"^SreDiag[A-Za-z]+$")]
    expr: Text
    for_: Duration | None = Field(default=None, alias="for")
    keep_firing_for: Duration | None = None
    labels: _Labels
    annotations: _Annotations


class _Group(_Strict):
    name: Text
    interval: Duration | None = None
    limit: int | None = None
    rules: list[_AlertRule] = Field(min_length=1)


class _RuleFile(_Strict):
    groups: list[_Group] = Field(min_length=1)


def _rules() -> _RuleFile:
    return _RuleFile.model_validate(yaml.safe_load(RULES.read_text(encoding="utf-8")))


def _problems(expr: str) -> list[str]:
    try:
        found = selectors(expr)
    except ValueError as exc:
        return [f"{expr!r}: {exc}"]
    return [p for selector in found for p in CATALOG.problems(selector)] or (
        [] if found else [f"{expr!r}: reads no metric"]
    )


# --- alert rules ------------------------------------------------------------------------------


def test_the_rules_file_has_prometheus_rule_format() -> None:
    rules = _rules()
    names = [rule.alert for group in rules.groups for rule in group.rules]
    assert len(names) == len(set(names)), names
    assert len({group.name for group in rules.groups}) == len(rules.groups)


def test_the_rules_cover_failures_queues_slow_runs_and_slack() -> None:
    served = {
        s.metric for group in _rules().groups for rule in group.rules for s in selectors(rule.expr)
    }
    assert {
        "diag_runs_total",
        "diag_runs_queued",
        "diag_jobs_queued",
        "diag_run_duration_seconds_bucket",
        "diag_slack_events_total",
    } <= served


def test_every_rule_reads_only_what_the_product_serves() -> None:
    rules = [rule for group in _rules().groups for rule in group.rules]
    problems = [p for rule in rules for p in _problems(rule.expr)]
    assert problems == []


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("sum(rate(diag_run_total[5m]))", "not served"),
        ('sum(diag_runs_total{outcom="FAILED"})', "has no label"),
        ('sum(diag_runs_total{outcome="FAILURE"})', "never emitted"),
        ('diag_slack_events_total{reason="STATE_GONE"}', "never emitted"),
        ('diag_tool_calls_total{status=~"READY|ERRORED"}', "never emitted"),
        ("sum(rate(diag_runs_total[5m])", "unclosed"),
        ("sum_rate(diag_runs_total)", "unknown function"),
    ],
)
def test_the_expression_check_catches_a_wrong_name(expr: str, expected: str) -> None:
    problems = _problems(expr)
    assert problems and expected in " ".join(problems), problems


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return promtool


def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alerts_fire_when_they_should_and_only_then() -> None:
    done = subprocess.run(
        [_promtool(), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULE_TESTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_tests_feed_series_the_product_serves() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    series = [s["series"] for case in cases for s in case["input_series"]]
    alerts = {rule.alert for group in _rules().groups for rule in group.rules}
    tested = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested == alerts, f"alerts without a rule test: {sorted(alerts - tested)}"
    assert [p for s in series for p in _problems(s)] == []


# --- Grafana dashboard ------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$(\{)?(\w+)(?(1)\})")
_SAMPLE_VALUES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def _dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def _expand(expr: str, defined: set[str]) -> str:
    """The expression as Grafana sends it: built-in intervals and this dashboard's variables
    replaced (a variable that is not defined is an error)."""

    def value(match: re.Match[str]) -> str:
        name = match[2]
        if name in _SAMPLE_VALUES:
            return _SAMPLE_VALUES[name]
        assert name in defined, f"${name} is not a variable of the dashboard"
        return ".*"

    return _VARIABLE.sub(value, expr)


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert {"title", "uid", "schemaVersion", "panels", "templating", "time"} <= set(dashboard)
    assert "id" not in dashboard or dashboard["id"] is None  # an id belongs to one Grafana
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = _variables(dashboard)
    source = variables["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in _panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["type"] in {"timeseries", "stat", "gauge", "bargauge", "table"}
        assert panel["targets"] and panel.get("description"), panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_the_panels_tile_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
        assert 0 <= x and w > 0 and x + w <= 24 and h > 0, panel["title"]
        cells = {(cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_panel_query_reads_only_what_the_product_serves() -> None:
    dashboard = _dashboard()
    defined = set(_variables(dashboard))
    problems = [
        p
        for panel in _panels(dashboard)
        for target in panel["targets"]
        for p in _problems(_expand(target["expr"], defined))
    ]
    for variable in _variables(dashboard).values():
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert match, variable["definition"]
            problems += CATALOG.problems(Selector(match[1], ()))
    assert problems == []


def test_the_dashboard_shows_every_metric_the_product_serves() -> None:
    dashboard = _dashboard()
    defined = set(_variables(dashboard))
    shown = {
        s.metric
        for panel in _panels(dashboard)
        for target in panel["targets"]
        for s in selectors(_expand(target["expr"], defined))
    }
    suffix = re.compile(r"_(total|created|bucket|count|sum)$")
    missing = CATALOG.families() - {suffix.sub("", name) for name in shown}
    assert not missing, f"metrics on no panel: {sorted(missing)}"
