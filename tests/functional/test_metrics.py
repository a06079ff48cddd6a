"""GET /metrics of running pumps and drainers: the original's series and ours exist, and move with the traffic.

A real cluster (etcd, pd-server, two pumps, a drainer into MariaDB and one into binlog files) gets a
database, a table and transactions of inserts, updates and deletes through the upstream writer and
its pump client.  Each process's /metrics is scraped before and after (parsed with
prometheus_client's parser) and compared: the pumps' WriteBinlog count grew by at least the binlogs
the client wrote, the drainer's events by exactly the rows changed, its checkpoint advanced, each
pump's pull series moved, the file sink's binlogfile series moved.

Every metric the original pump and drainer export (the fact list tests/data/original_metrics.txt) is
on the live processes' /metrics under its exact name, with the original's type and labels, and every
metric the original's alert rules read (tests/data/original_alert_rules.txt) is served, so those rules
work unchanged.  The text is read as scraped (tests/harness/metricfacts.py), counters without a `_total`
added.

"Documented" is read from the metrics modules' docstrings (every `binlog_pump_*` name in
pump/metrics.py, `binlog_drainer_*` in drainer/metrics.py, `binlog_binlogfile_*` in
common/binlogfile/metrics.py), so a series named in the docs but never registered fails here.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterable
from typing import Final

import pytest

import common.binlogfile.metrics as binlogfile_metrics
import drainer.metrics as drainer_metrics
import pump.metrics as pump_metrics
from common import tso
from tests.functional.drainerutil import Cluster
from tests.harness.metricfacts import (
    EXPORTED,
    GO_RUNTIME,
    UNREGISTERED,
    Exposition,
    metric_names,
    original_alert_rules,
    original_metrics,
)
from tools.localcluster import NodeProcess
from upstream.ddl import Column

pytestmark = pytest.mark.functional

NOT_EXPORTED: Final = frozenset({"binlog_drainer_slow_chaser_catchup_time_seconds"})
"""Named in the drainer's docstring, served by the pump (as the original did)."""
KAFKA_PREFIX: Final = "binlog_drainer_kafka_"
"""Exported by a drainer with db-type kafka only (tests/functional/test_drainer_kafka.py checks them)."""
ROWS: Final = 40
UPDATES: Final = 7
DELETES: Final = 5


class Scrape(Exposition):
    """One GET /metrics, as scraped."""

    def __init__(self, node: NodeProcess) -> None:
        with urllib.request.urlopen(f"http://{node.status_addr}/metrics", timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = resp.read().decode()
        parsed = Exposition.parse(text)
        super().__init__(parsed.types, parsed.label_names, parsed.samples, parsed.type_lines)
        self.families = self.types


def check_original(s: Scrape, component: str) -> None:
    """`s` serves every metric the original `component` exported: exact name, type and labels."""
    facts = original_metrics(component)
    assert facts
    for m in facts:
        if m.status == GO_RUNTIME:
            assert m.name not in s.types, m.name
            continue
        assert s.types.get(m.name) == m.type, f"{component} /metrics: {m.name} is {s.types.get(m.name)}, not {m.type}"
        if s.label_names[m.name]:
            assert s.label_names[m.name] == m.labels, m.name
    assert len(s.type_lines) == len(set(s.type_lines)), f"{component} /metrics declares a family twice"


def documented(doc: str | None, prefix: str) -> set[str]:
    names = set(re.findall(r"binlog_[a-z0-9_]*[a-z0-9]", doc or ""))
    return {n for n in names if n.startswith(prefix)} - NOT_EXPORTED


def pumps_total(scrapes: Iterable[Scrape], name: str, **match: str) -> float:
    return sum(s.total(name, **match) for s in scrapes)


def write_traffic(cluster: Cluster) -> str:
    """A database, a table, ROWS inserts in transactions of 4 rows, then UPDATES updates and DELETES deletes."""
    db = cluster.writer()
    name = cluster.dbname("metrics")
    db.create_database(name)
    db.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "INT")], primary_key=["id"])
    table = f"{name}.t"
    for first in range(0, ROWS, 4):
        txn = db.begin()
        for i in range(first, min(first + 4, ROWS)):
            txn.insert(table, {"id": i, "v": i})
        txn.commit()
    txn = db.begin()
    for i in range(UPDATES):
        txn.update(table, i, {"v": -i})
    for i in range(ROWS - DELETES, ROWS):
        txn.delete(table, i)
    txn.commit()
    return name


def test_pump_and_drainer_metrics_exist_and_move(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    files = cluster.drainer("--syncer.db-type", "file", sink="file", name="fdrainer")
    pump_ids = [p.node_id for p in cluster.pumps]
    cluster.wait_applied(drainer, cluster.now())
    pumps_before = [Scrape(p) for p in cluster.pumps]
    before = Scrape(drainer)
    files_before = Scrape(files)

    write_traffic(cluster)
    client = cluster.clients[-1]
    written = sum(client.metrics.writes(node_id) for node_id in pump_ids)
    assert written >= 2 * (ROWS // 4 + 1)  # a prewrite and a commit per transaction, DDLs besides
    target = cluster.now()
    cluster.wait_applied(drainer, target)
    cluster.wait_applied(files, target)
    pumps_after = [Scrape(p) for p in cluster.pumps]
    after = Scrape(drainer)
    files_after = Scrape(files)

    # ------------------------------------------------ every series the original exported, under its name
    for s in pumps_after:
        check_original(s, "pump")
    for s in (after, files_after):
        check_original(s, "drainer")
    served = set().union(*(s.series() for s in (*pumps_after, after)))
    for alert, expr in original_alert_rules():
        assert metric_names(expr) <= served, f"the original's alert {alert} reads {expr}: not all served"
    unregistered = {m.name for m in original_metrics() if m.status == UNREGISTERED}
    assert unregistered <= set().union(*(s.types for s in (*pumps_after, after)))  # ours serve them too
    assert all(m.name in after.types for m in original_metrics("drainer") if m.status == EXPORTED)
    assert "binlog_drainer_slow_chaser_catchup_time_seconds" not in after.types  # the pump's, as the original

    # ------------------------------------------------------------------ every documented series exists
    for s in pumps_after:
        missing = documented(pump_metrics.__doc__, "binlog_pump_") - set(s.families)
        assert missing == set(), f"pump /metrics lacks {sorted(missing)}"
        assert "process_resident_memory_bytes" in s.families
    wanted = documented(drainer_metrics.__doc__, "binlog_drainer_") | documented(
        binlogfile_metrics.__doc__, "binlog_binlogfile_"
    )
    kafka_only = documented(drainer_metrics.__doc__, KAFKA_PREFIX)  # test_drainer_kafka.py checks them
    assert kafka_only, "the kafka sink's metrics are not in drainer.metrics' docstring"
    for s in (after, files_after):
        missing = wanted - kafka_only - set(s.families)
        assert missing == set(), f"drainer /metrics lacks {sorted(missing)}"
        assert not kafka_only & set(s.families), "kafka sink metrics exported by a drainer of another db-type"
        assert "process_resident_memory_bytes" in s.families
    assert after.families["binlog_drainer_event"] == "counter"
    assert after.families["binlog_drainer_execute_duration_time"] == "histogram"
    assert after.families["binlog_drainer_pump_position"] == "gauge"

    # ------------------------------------------------------------------------------------- pumps
    def grew(name: str, **match: str) -> float:
        return pumps_total(pumps_after, name, **match) - pumps_total(pumps_before, name, **match)

    write_ok = {"method": "WriteBinlog", "label": "succ"}
    assert grew("binlog_pump_rpc_duration_seconds_count", **write_ok) >= written
    assert grew("binlog_pump_rpc_duration_seconds_bucket", le="+Inf", **write_ok) >= written
    assert grew("binlog_pump_storage_write_binlog_size_count", type="single") >= written
    assert grew("binlog_pump_storage_write_binlog_duration_time_count", type="single") >= written
    assert grew("binlog_pump_storage_write_binlog_size_sum", type="single") > 0
    assert grew("binlog_pump_storage_write_binlog_duration_time_count", type="batch") >= 1
    assert grew("binlog_pump_storage_write_binlog_duration_time_count", type="fsync") >= 1
    for b, a in zip(pumps_before, pumps_after, strict=True):
        assert a.get("binlog_pump_storage_max_commit_ts") > b.get("binlog_pump_storage_max_commit_ts") > 0
        assert a.get("binlog_pump_storage_storage_size_bytes", type="available") > 0
        assert a.get("binlog_pump_storage_storage_size_bytes", type="capacity") > 0
        assert ("binlog_pump_storage_write_queue_bytes", ()) in a.samples
        assert ("binlog_pump_rpc_inflight_write_bytes", ()) in a.samples

    # ----------------------------------------------------------------------------------- drainer
    def moved(name: str, **labels: str) -> float:
        return after.get(name, **labels) - before.get(name, **labels)

    assert moved("binlog_drainer_event", type="Insert") == ROWS
    assert moved("binlog_drainer_event", type="Update") == UPDATES
    assert moved("binlog_drainer_event", type="Delete") == DELETES
    assert moved("binlog_drainer_event", type="DDL") == 2  # CREATE DATABASE, CREATE TABLE
    assert moved("binlog_drainer_ddl_jobs_total") == 2
    assert moved("binlog_drainer_event", type="savepoint") >= 1
    assert (
        after.get("binlog_drainer_checkpoint_tso") >= tso.physical(target) > before.get("binlog_drainer_checkpoint_tso")
    )
    assert moved("binlog_drainer_checkpoint_delay_seconds_count") >= 1
    assert moved("binlog_drainer_execute_duration_time_count") >= 1 + 2  # DML chunks and the two DDLs
    assert moved("binlog_drainer_query_duration_time_count", type="exec") >= 3
    assert moved("binlog_drainer_query_duration_time_count", type="commit") == 2  # the DDLs' commits
    assert after.get("binlog_drainer_disorder_binlog_count") == 0
    for node_id in pump_ids:
        assert moved("binlog_drainer_binlog_reach_duration_time_count", nodeID=node_id) >= 1, node_id
        assert moved("binlog_drainer_read_binlog_size_count", nodeID=node_id) >= 1, node_id
        assert moved("binlog_drainer_read_binlog_size_sum", nodeID=node_id) > 0, node_id
        assert after.get("binlog_drainer_pump_position", nodeID=node_id) >= tso.physical(target), node_id
        assert ("binlog_drainer_merger_buffered_bytes", (("nodeID", node_id),)) in after.samples, node_id
    assert ("binlog_drainer_loader_inflight_bytes", ()) in after.samples
    assert ("binlog_drainer_queue_size", (("name", "syncer_input"),)) in after.samples

    # ------------------------------------------------------------------ the file sink's binlog files
    def file_moved(name: str, **labels: str) -> float:
        return files_after.get(name, **labels) - files_before.get(name, **labels)

    local = {"label": "local"}
    assert file_moved("binlog_binlogfile_write_binlog_size_count", **local) >= ROWS // 4 + 1 + 2  # txns + DDLs
    assert file_moved("binlog_binlogfile_write_binlog_size_sum", **local) > 0
    assert file_moved("binlog_binlogfile_write_binlog_duration_time_count", **local) >= 1
    assert files_after.get("binlog_binlogfile_corruption_binlog_count") == 0
    assert file_moved("binlog_drainer_event", type="Insert") == ROWS
    assert file_moved("binlog_drainer_execute_duration_time_count") == 0  # not a SQL sink
