"""deploy/grafana/tidb-binlog.json and deploy/prometheus/alert.rules.yml only use series our code exports.

The series names come from the text our components serve (PumpMetrics and DrainerMetrics `render()`,
the binlogfile set included), each family's name and type giving the sample names PromQL reads, so a
labelled histogram that has no child yet still counts.  Metric names are parsed out of each PromQL
expression by `tests.harness.metricfacts.metric_names`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from drainer.metrics import DrainerMetrics
from pump.metrics import PumpMetrics
from pump.storage.api import StorageStatus
from tests.harness.metricfacts import Exposition, metric_names

ROOT: Final = Path(__file__).resolve().parents[2]
DASHBOARD: Final = ROOT / "deploy" / "grafana" / "tidb-binlog.json"
RULES: Final = ROOT / "deploy" / "prometheus" / "alert.rules.yml"


def test_the_expression_parser_finds_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.99, sum(rate(a_bucket{method="x", instance=~"$pump|y"}[1m])) by (le, instance))'
        " / on(instance) group_left b_total - time() + c / 1000 > bool 2e3 and d offset 5m"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c", "d"}


def exported_series() -> set[str]:
    """Every sample name our pumps and drainers can expose on /metrics, read from what `render()` serves."""
    status = StorageStatus(
        max_commit_ts=1, gc_ts=1, head_fid=0, head_offset=0, capacity_bytes=1, available_bytes=1,
        pending_prewrites=0, chaser_on=False, write_count=0,
    )  # fmt: skip
    texts = [PumpMetrics(lambda: status, lambda: 0).render(), DrainerMetrics().render()]
    return {name for text in texts for name in Exposition.parse(text.decode()).series()}


@pytest.fixture(scope="module")
def exported() -> set[str]:
    names = exported_series()
    assert "binlog_pump_storage_max_commit_ts" in names
    assert "binlog_drainer_binlog_reach_duration_time_bucket" in names  # labelled, no child yet
    return names


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def panel_exprs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            found.extend((p.get("title", "?"), t["expr"]) for t in p.get("targets", []) if "expr" in t)
            walk(p.get("panels", []))

    walk(doc["panels"])
    return found


def test_the_dashboard_is_a_grafana_dashboard_with_its_variables() -> None:
    doc = dashboard()
    assert doc["schemaVersion"] >= 36
    assert doc["title"]
    assert doc["uid"]
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {"job", "pump", "drainer"} <= set(variables)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            assert p["targets"], p["title"]
            assert {"h", "w", "x", "y"} <= set(p["gridPos"]), p["title"]
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert rows[:2] == ["Pump", "Drainer"]


def test_every_dashboard_expression_reads_only_exported_series(exported: set[str]) -> None:
    doc = dashboard()
    exprs = panel_exprs(doc)
    assert len(exprs) >= 25
    unknown = {(title, n) for title, e in exprs for n in metric_names(e) if n not in exported}
    assert unknown == set()
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            query = v["query"]["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert inner is not None, query
            assert metric_names(inner.group(1)) <= exported, query


def test_the_dashboard_covers_the_pump_and_drainer_essentials() -> None:
    used = {n for _, e in panel_exprs(dashboard()) for n in metric_names(e)}
    for name in (
        "binlog_pump_rpc_duration_seconds_count",
        "binlog_pump_rpc_duration_seconds_bucket",
        "binlog_pump_storage_write_binlog_duration_time_bucket",
        "binlog_pump_storage_storage_size_bytes",
        "binlog_pump_storage_max_commit_ts",
        "binlog_pump_storage_gc_ts",
        "binlog_drainer_checkpoint_tso",
        "binlog_drainer_event",
        "binlog_drainer_execute_duration_time_bucket",
        "binlog_drainer_query_duration_time_bucket",
        "binlog_drainer_pump_position",
        "binlog_drainer_merger_buffered_bytes",
        "binlog_drainer_loader_inflight_bytes",
        "binlog_drainer_binlog_reach_duration_time_bucket",
    ):
        assert name in used, name


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert isinstance(doc, dict)
    assert [g["name"] for g in doc["groups"]] == ["tidb-binlog"]
    found: list[dict[str, Any]] = doc["groups"][0]["rules"]
    return found


def test_alert_rules_are_well_formed() -> None:
    found = rules()
    assert [r["alert"] for r in found] == [
        "binlog_pump_storage_error_count",
        "binlog_drainer_checkpoint_high_delay",
        "binlog_pump_write_binlog_rpc_duration_seconds_bucket",
        "binlog_pump_storage_write_binlog_duration_time_bucket",
        "binlog_pump_storage_available_size_less_than_20G",
        "binlog_drainer_checkpoint_tso_no_change_for_1m",
        "binlog_drainer_execute_duration_time_more_than_10s",
        "binlog_drainer_pump_stalled",
    ]
    for r in found:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert r["labels"]["severity"] in ("emergency", "critical", "warning"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert len(r["annotations"]["description"]) > 80, r["alert"]
        assert r["expr"].count("(") == r["expr"].count(")"), r["alert"]
        if "for" in r:
            assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]


def test_every_alert_expression_reads_only_exported_series(exported: set[str]) -> None:
    unknown = {(r["alert"], n) for r in rules() for n in metric_names(r["expr"]) if n not in exported}
    assert unknown == set()


def test_the_execute_rules_bucket_bound_is_one_we_export() -> None:
    m = DrainerMetrics()
    m.execute_duration.observe(1.0)
    bounds = {s.labels["le"] for f in m.registry.collect() for s in f.samples if s.name.endswith("_bucket")}
    (rule,) = [r for r in rules() if r["alert"] == "binlog_drainer_execute_duration_time_more_than_10s"]
    used = set(re.findall(r'le="([^"]+)"', rule["expr"]))
    assert used == {"6.5536"}
    assert used <= bounds
