"""The Grafana dashboard draws the error band as a band, and charts only what is true.

What this proves (on the shipped JSON, no Grafana needed): the band panel has a released series
and an upper and a lower edge that are the same released series plus and minus the same
multiple of the stream's standard deviation; an override fills from the upper edge down to the
lower one (``custom.fillBelowTo`` naming the lower edge's legend exactly, so Grafana draws a
filled band rather than three lines); every series name the overrides refer to is one a query
produces; every ``$variable`` a query uses is defined; every metric a query selects is one
``streamdp.metrics`` exports; the removed consistency gauges (an iteration count that was always
1 and a tolerance nothing used) are charted nowhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from streamdp.metrics_catalogue import exported_sample_names

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy/grafana/dashboards/streamdp.json"
GRAFANA_BUILTINS = {"__rate_interval", "__range", "__interval"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def band_panel() -> dict[str, Any]:
    """The one panel with a fill-between override."""
    found = [
        panel
        for panel in dashboard()["panels"]
        if any(
            prop["id"] == "custom.fillBelowTo"
            for override in panel.get("fieldConfig", {}).get("overrides", [])
            for prop in override["properties"]
        )
    ]
    assert len(found) == 1, [p["title"] for p in found]
    return found[0]


def test_band_panel_fills_between_its_upper_and_lower_edge() -> None:
    panel = band_panel()
    legends = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    fills = [
        (override["matcher"], prop["value"])
        for override in panel["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "custom.fillBelowTo"
    ]
    assert len(fills) == 1
    matcher, lower_name = fills[0]
    assert matcher["id"] == "byName"
    upper_name = matcher["options"]
    # both ends of the fill are series the panel's queries produce (fixed legends, no {{...}}:
    # byName matches the displayed name exactly)
    assert upper_name in legends
    assert lower_name in legends
    assert "{{" not in upper_name + lower_name
    released = [e for name, e in legends.items() if name not in (upper_name, lower_name)]
    assert len(released) == 1
    centre = released[0]
    upper, lower = legends[upper_name], legends[lower_name]
    # upper = centre + K * sd + 1 and lower = centre - K * sd - 1, same centre, same K * sd
    assert upper.startswith(centre + " + ")
    assert lower.startswith(centre + " - ")
    spread_up = upper.removeprefix(centre + " + ")
    spread_down = lower.removeprefix(centre + " - ")
    assert spread_up.endswith(" + 1")
    assert spread_down.endswith(" - 1")
    assert spread_up.removesuffix(" + 1") == spread_down.removesuffix(" - 1")
    assert "streamdp_release_stddev" in spread_up
    # the fill is visible and the edges are not drawn as lines of their own
    props = {
        override["matcher"]["options"]: {p["id"]: p["value"] for p in override["properties"]}
        for override in panel["fieldConfig"]["overrides"]
    }
    assert props[upper_name]["custom.fillOpacity"] > 0
    assert props[upper_name]["custom.lineWidth"] == 0
    assert props[lower_name]["custom.lineWidth"] == 0


def test_band_panel_repeats_one_counter_per_panel() -> None:
    """A fixed legend names one series only if the panel holds one stream and one counter."""
    panel = band_panel()
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert panel["repeat"] in variables
    stream_variables = {
        name for t in panel["targets"] for name in re.findall(r'stream=~"\$([a-z_]+)"', t["expr"])
    }
    assert stream_variables
    assert all(not variables[v]["multi"] for v in stream_variables)
    for t in panel["targets"]:
        if "streamdp_release_cumulative" in t["expr"]:
            assert f'counter=~"${panel["repeat"]}"' in t["expr"]


def test_queries_use_defined_variables_and_exported_metrics() -> None:
    data = dashboard()
    defined = {v["name"] for v in data["templating"]["list"]} | GRAFANA_BUILTINS
    exported = exported_sample_names() | {"up"}
    queries = [t["expr"] for p in data["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in data["templating"]["list"]]
    for expr in queries:
        assert set(re.findall(r"\$([a-z_]+)", expr)) <= defined, expr
        names = set(re.findall(r"\bstreamdp_[a-z_]+", expr))
        assert names <= exported, (expr, names - exported)


def test_removed_consistency_gauges_are_charted_nowhere() -> None:
    text = DASHBOARD.read_text()
    for name in ("streamdp_consistency_iterations", "streamdp_consistency_tolerance"):
        assert name not in text
        assert name not in exported_sample_names()


def test_every_budget_family_is_charted_for_both_privacy_definitions() -> None:
    """A zCDP stream's ledger is exported in the rho families (streamdp_rho_spent, ...), never
    in the epsilon ones: a dashboard charting only the epsilon families showed nothing of the
    budget of a zCDP stream or source. Each spend, cap and headroom family is charted (the
    (epsilon, delta) bound of a zCDP stream's rho is a restatement, on /status)."""
    from streamdp.metrics_catalogue import BUDGET_METRICS

    queries = " ".join(t["expr"] for p in dashboard()["panels"] for t in p["targets"])
    charted = set(re.findall(r"\bstreamdp_[a-z_]+", queries))
    missing = set(BUDGET_METRICS) - {"streamdp_stream_zcdp_epsilon"} - charted
    assert not missing, sorted(missing)
