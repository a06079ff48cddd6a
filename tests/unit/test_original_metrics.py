"""Every metric the original exports (tests/data/original_metrics.txt) is in our components' /metrics text.

The text is `render()` of `PumpMetrics`, `DrainerMetrics` and `ArbiterMetrics` as their HTTP handlers
serve it, read with a faithful parser (tests/harness/metricfacts.py): each of the original's names
has a `# TYPE` line of the original's type, its samples carry the original's labels, no `go_*` series
is claimed, no name is declared twice, and the names the original's alert rules and dashboard read are
there.  tests/functional/test_metrics.py checks the same on live processes.
"""

from __future__ import annotations

from typing import Final

import pytest

from arbiter.metrics import ArbiterMetrics
from common import tso
from common.events import Txn
from drainer.metrics import DrainerMetrics
from pump.metrics import PULL_BINLOGS, WRITE_BINLOG, PumpMetrics
from pump.storage.api import StorageStatus
from tests.harness.metricfacts import (
    EXPORTED,
    GO_RUNTIME,
    UNREGISTERED,
    Exposition,
    metric_names,
    original_alert_rules,
    original_dashboard_metrics,
    original_metrics,
)

TS: Final = tso.compose(1_700_000_000_000, 0)


def pump_text() -> str:
    status = StorageStatus(
        max_commit_ts=TS, gc_ts=TS, head_fid=0, head_offset=0, capacity_bytes=10, available_bytes=5,
        pending_prewrites=0, chaser_on=False, write_count=0,
    )  # fmt: skip
    m = PumpMetrics(lambda: status, lambda: 0)
    m.observe_rpc(WRITE_BINLOG, True, 0.001)
    m.observe_rpc(PULL_BINLOGS, False, 1.0)
    m.loss_binlog.inc()
    m.drainer_purge.labels(id="d1").inc()
    m.storage.write_single(100, 0.001)
    m.storage.write_batch(2, 200, 0.001, 0.002)
    m.storage.error("write_binlog")
    m.storage.chaser("catch_up", 0.5)
    m.storage.resolver_query()
    m.storage.gc_done(TS, 3)
    return m.render().decode()


def drainer_text() -> str:
    m = DrainerMetrics(positions=lambda: {"pump-1": TS}, queue_size=lambda: 7)
    m.source("pump-1").received(TS, 100)
    m.count_events([], ddl=True)
    m.ddl_jobs.inc()
    m.saved(TS)
    m.fatal(ValueError("x"))
    m.sink.executed(0.01)
    m.sink.query_exec(0.01)
    return m.render().decode()


def arbiter_text() -> str:
    m = ArbiterMetrics(lambda: 1, lambda: 2)
    m.handed(Txn(commit_ts=TS))
    m.applied(TS)
    m.saved(TS)
    m.query_exec(0.01)
    return m.render().decode()


TEXTS: Final = {"pump": pump_text, "drainer": drainer_text, "arbiter": arbiter_text}


@pytest.mark.parametrize("component", sorted(TEXTS))
def test_every_original_metric_is_served_with_its_type_and_labels(component: str) -> None:
    e = Exposition.parse(TEXTS[component]())
    facts = original_metrics(component)
    assert len([m for m in facts if m.status == EXPORTED]) >= 5
    for m in facts:
        if m.status == GO_RUNTIME:
            assert m.name not in e.types, f"{m.name} is the Go runtime's: not ours to claim"
            continue
        assert e.types.get(m.name) == m.type, f"{component} /metrics: {m.name} is {e.types.get(m.name)}, not {m.type}"
        if e.label_names[m.name] or not m.labels:  # a labelled family with no child yet has no labels to show
            assert e.label_names[m.name] == m.labels, m.name
    assert len(e.type_lines) == len(set(e.type_lines)), "a family declared twice"
    assert not any(n.endswith("_total_total") for n in e.types)
    assert not any(n.endswith("_created") for n in e.types)


def test_the_unregistered_ones_are_served_by_ours_too() -> None:
    unregistered = {m.name for m in original_metrics() if m.status == UNREGISTERED}
    assert unregistered == {"binlog_pump_detected_drainer_binlog_purge_count", "binlog_drainer_disorder_binlog_count"}
    served = set(Exposition.parse(pump_text()).types) | set(Exposition.parse(drainer_text()).types)
    assert unregistered <= served


def test_the_catchup_histogram_is_the_pumps_under_the_original_name() -> None:
    pump, drainer = Exposition.parse(pump_text()), Exposition.parse(drainer_text())
    assert pump.get("binlog_drainer_slow_chaser_catchup_time_seconds_count") == 1
    assert "binlog_drainer_slow_chaser_catchup_time_seconds" not in drainer.types
    assert not any("pump_storage_slow_chaser_catchup" in n for n in pump.types)


def test_counters_have_the_go_clients_names_and_values() -> None:
    pump, drainer = Exposition.parse(pump_text()), Exposition.parse(drainer_text())
    assert pump.get("binlog_pump_loss_binlog_count") == 1
    assert pump.get("binlog_pump_storage_error_count", type="write_binlog") == 1
    assert pump.get("binlog_pump_storage_deleted_kv_total") == 3
    assert pump.get("binlog_pump_storage_query_tikv_count") == 1
    assert drainer.get("binlog_drainer_ddl_jobs_total") == 1
    assert drainer.get("binlog_drainer_event", type="DDL") == 1
    assert drainer.get("binlog_drainer_error_count", type="ValueError") == 1
    assert drainer.types["process_cpu_seconds_total"] == "counter"
    assert drainer.get("process_virtual_memory_max_bytes") > 0


def test_the_original_alert_rules_read_only_served_series() -> None:
    served = Exposition.parse(pump_text()).series() | Exposition.parse(drainer_text()).series()
    rules = original_alert_rules()
    assert len(rules) == 7
    for alert, expr in rules:
        names = metric_names(expr)
        assert names, alert
        assert names <= served, f"{alert}: {sorted(names - served)} not served"


def test_the_original_dashboard_reads_only_served_series_but_the_go_runtimes() -> None:
    served = Exposition.parse(pump_text()).series() | Exposition.parse(drainer_text()).series()
    names = original_dashboard_metrics()
    assert len(names) > 15
    assert names - served == {
        "go_goroutines",
        "go_memstats_heap_inuse_bytes",
        "tidb_server_critical_error_total",
    }
