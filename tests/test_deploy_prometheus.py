"""deploy/prometheus and deploy/grafana against the real tools and the metrics catalogue.

What this proves:
- ``promtool check config`` / ``check rules`` accept the shipped files, and every Grafana query
  is valid PromQL (promtool parses it as a recording rule);
- ``promtool test rules`` passes, every alert has a firing and a quiet unit test, and the unit
  tests bite: disabling any one alert makes them fail;
- every metric named by an alert, an alert unit test or a dashboard query is one that
  ``streamdp.metrics`` exports (plus ``up``);
- a real Prometheus server scrapes a worker's ``/metrics`` and serves the epsilon gauge through
  its HTTP query API with the value the worker exposes.

Tools: promtool and prometheus (Debian package ``prometheus``). Absent -> skip locally with the
package name, fail under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from streamdp.metrics_catalogue import exported_sample_names

ROOT = Path(__file__).resolve().parent.parent
PROM_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
ALERT_TESTS = PROM_DIR / "tests" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamdp.json"
PROMETHEUS_BUILTINS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}

pytestmark = pytest.mark.tool


def require_tool(name: str) -> str:
    """Path of ``name``; skip loudly locally, fail under CI (the CI script installs it)."""
    path = shutil.which(name)
    if path is None:
        message = (
            f"{name} not found: install the Debian package 'prometheus' "
            "(apt-get install -y prometheus), which provides promtool and prometheus"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


# --- PromQL metric-name extraction --------------------------------------------------------------
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "atan2",
}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (PromQL lexing, good enough for our expressions).

    Drops string literals, label matchers, range/subquery brackets and grouping label lists,
    then keeps identifiers that are not keywords and not followed by ``(`` (functions).
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][\w:]*", text):
        after = text[match.end() :].lstrip()
        if after.startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('up{job="streamdp"} == 0', {"up"}),
        (
            (
                'sum by (topic, reason) (rate(streamdp_events_rejected_total{reason!="by(x)"}[5m]))'
                " / on (topic) group_left sum by (topic) (streamdp_input_records_total) > 1e-6"
            ),
            {"streamdp_events_rejected_total", "streamdp_input_records_total"},
        ),
        (
            (
                "histogram_quantile(0.95, sum by (le) (rate(a_bucket[$__rate_interval]))) "
                "and b offset 5m"
            ),
            {"a_bucket", "b"},
        ),
        ("time() - max(streamdp_x > 0)", {"streamdp_x"}),
    ],
)
def test_metric_name_extraction(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else ""
        inner = re.fullmatch(r"label_values\((\w+(?:\{[^}]*\})?),\s*\w+\)", query)
        assert inner, f"unexpected template query {query!r}"
        exprs.append(inner.group(1))
    return exprs


def grafana_to_promql(expr: str) -> str:
    """``expr`` with Grafana's built-ins and the dashboard's variables (all used in ``=~``
    matchers) substituted, as Grafana would before sending it."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$[a-z_]+", ".*", expr)


def test_every_named_metric_is_exported_by_streamdp() -> None:
    allowed = exported_sample_names() | PROMETHEUS_BUILTINS
    used: dict[str, set[str]] = {}
    for rule in alert_rules():
        used[f"alert {rule['alert']}"] = metric_names(rule["expr"])
    for expr in dashboard_exprs():
        used[f"dashboard {expr[:60]}"] = metric_names(expr)
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for series in case["input_series"]:
            used[f"test series {series['series']}"] = {series["series"].split("{")[0]}
    assert all(used.values()), "an expression selects no metric at all"
    unknown = {where: names - allowed for where, names in used.items() if names - allowed}
    assert not unknown, f"names that streamdp.metrics does not export: {unknown}"
    # the dashboard covers the catalogue's main families
    dashboard_names = set().union(*(metric_names(e) for e in dashboard_exprs()))
    for family in (
        "streamdp_epsilon_spent",
        "streamdp_source_epsilon_cap",
        "streamdp_release_cumulative",
        "streamdp_consistent_cumulative",
        "streamdp_events_rejected_total",
        "streamdp_consumer_lag_records",
        "streamdp_consistency_residual",
        "streamdp_source_epsilon_headroom",
        "streamdp_stream_next_epoch_epsilon",
        "streamdp_source_epsilon_sequential_spent",
        "streamdp_consistency_duration_seconds_bucket",
        "streamdp_period_close_latency_seconds_bucket",
    ):
        assert family in dashboard_names, family


def test_promtool_accepts_config_and_rules() -> None:
    promtool = require_tool("promtool")
    config = run([promtool, "check", "config", "prometheus.yml"], PROM_DIR)
    assert config.returncode == 0, config.stdout + config.stderr
    rules = run([promtool, "check", "rules", "alerts.yml"], PROM_DIR)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in rules.stdout


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, expr in enumerate(dashboard_exprs())
    ]
    (tmp_path / "dashboard.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = run([promtool, "check", "rules", "dashboard.yml"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - quiet == set(), "alerts without a quiet test"


def test_promtool_rule_unit_tests_pass() -> None:
    promtool = require_tool("promtool")
    result = run([promtool, "test", "rules", ALERT_TESTS.name], ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alert_rules()])
def test_unit_tests_fail_when_an_alert_is_disabled(alert: str, tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    groups = yaml.safe_load(ALERTS.read_text())
    for group in groups["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["expr"] = "vector(1) < 0"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(groups))
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = ["alerts.yml"]
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(tests))
    result = run([promtool, "test", "rules", "alerts_test.yml"], tmp_path)
    assert result.returncode != 0
    assert f"alertname: {alert}" in result.stdout + result.stderr


# --- a real Prometheus scraping a worker -------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # loopback only
        body: bytes = response.read()
        return body.decode()


def epsilon_samples(metrics_text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["stream"], s.labels["source"]): s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
        if s.name == "streamdp_epsilon_spent"
    }


@pytest.fixture
def worker(broker: Any, tmp_path: Path, unique_name: Any) -> Iterator[int]:
    """A real ``streamdp worker`` on the embedded broker that has released some periods."""
    from daemon_harness import (
        Worker,
        close_through,
        create_topics,
        lines_as_records,
        make_scenario,
        produce,
    )

    from streamdp.daemon.routing import OutputTopics

    suffix = unique_name("prom")
    scenario = make_scenario(periods=6, rate=4, suffix=suffix)
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    topics = OutputTopics.in_namespace(f"out-{suffix}")
    app_id = f"app-{suffix}"
    create_topics(broker, scenario, config, 2, app_id=app_id, topics=topics)
    process = Worker(
        broker, config, app_id=app_id, partitions=2, data_dir=tmp_path / "data",
        log_path=tmp_path / "worker.log", namespace=f"out-{suffix}", clock=scenario.clock,
    )  # fmt: skip
    try:
        process.wait_ready()
        produce(broker, lines_as_records(scenario))
        close_through(broker, scenario, topics, app_id, cut=None, partitions=2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(v > 0 for v in epsilon_samples(process.metrics()).values()):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the worker released nothing:\n{process.log_tail()}")
        yield process.port
    finally:
        process.stop()


def test_prometheus_scrapes_the_worker_and_serves_epsilon_spent(
    worker: int, tmp_path: Path
) -> None:
    prometheus = require_tool("prometheus")
    web_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": "streamdp", "static_configs": [{"targets": [f"127.0.0.1:{worker}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        expected = epsilon_samples(http_get(f"http://127.0.0.1:{worker}/metrics"))
        assert expected, "the worker exposes no streamdp_epsilon_spent series"
        # the daily restaurant and census streams have spent their epsilon (ledger values)
        assert expected[("restaurant-items", "restaurant-orders")] == 1.0
        assert expected[("admissions-census", "hospital-admissions")] == 0.5
        query = urllib.parse.urlencode({"query": "streamdp_epsilon_spent"})
        result: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not result:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            try:
                answer = json.loads(http_get(f"{base}/api/v1/query?{query}"))
                result = answer["data"]["result"]
            except OSError:
                pass  # server still starting
            if not result:
                time.sleep(0.5)
        assert result, "Prometheus never returned streamdp_epsilon_spent"
        got = {(r["metric"]["stream"], r["metric"]["source"]): float(r["value"][1]) for r in result}
        assert got == expected
        assert {r["metric"]["job"] for r in result} == {"streamdp"}
        up = json.loads(http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': 'up'})}"))
        assert [float(r["value"][1]) for r in up["data"]["result"]] == [1.0]
    finally:
        server.terminate()
        server.communicate(timeout=30)
