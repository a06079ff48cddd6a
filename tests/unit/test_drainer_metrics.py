"""The drainer's metrics (drainer/metrics.py) on their real update paths, without servers.

The puller's per-pump series through `Puller._accept` (what each received message goes through), the
merger's bytes per pump and the sink's in-flight bytes through `DrainerMetrics.for_drainer`, the sqlite
sink's execute/query timings through its observer, events counted per transaction, the fatal error's type.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from common import tso
from common.errors import CodecError
from common.events import Txn
from common.pb import binlog_pb2, gogo
from drainer.errors import PullerError
from drainer.merger import MergeItem, Merger
from drainer.metrics import UNMARSHAL_BINLOG, DrainerMetrics, error_type
from drainer.puller import Puller
from drainer.sinks.sqlite import SqliteSink
from tests.unit.test_drainer_sql import Schema, dele, ins, upd
from upstream.ddl import Column

NODE: str = "pump-1"


def value(m: DrainerMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    got = m.registry.get_sample_value(name, labels or {})
    assert got is not None, f"{name} {labels} is not exported"
    return got


def pull_message(commit_ts: int, payload_pad: int = 0) -> bytes:
    b = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=commit_ts - 1, commit_ts=commit_ts)
    if payload_pad:
        b.prewrite_value = b"x" * payload_pad
    return gogo.marshal_pull_resp(b.SerializeToString(), b.start_ts, commit_ts)


def test_a_received_binlog_is_observed_per_pump_with_its_latency_and_size() -> None:
    m = DrainerMetrics()
    merger = Merger(0)
    merger.add_source(NODE)
    puller = Puller(NODE, "127.0.0.1:1", 1, 0, merger, metrics=m)
    committed_ms = int(time.time() * 1000) - 1500  # committed 1.5 s ago
    raw = pull_message(tso.compose(committed_ms, 0), payload_pad=1000)
    assert puller._accept(raw)
    labels = {"nodeID": NODE}
    assert value(m, "binlog_drainer_binlog_reach_duration_time_count", labels) == 1
    reach = value(m, "binlog_drainer_binlog_reach_duration_time_sum", labels)
    assert 1.5 <= reach < 60, reach
    assert value(m, "binlog_drainer_binlog_reach_duration_time_bucket", {**labels, "le": "0.8192"}) == 0
    assert value(m, "binlog_drainer_binlog_reach_duration_time_bucket", {**labels, "le": "1.6384"}) <= 1
    assert value(m, "binlog_drainer_read_binlog_size_count", labels) == 1
    assert value(m, "binlog_drainer_read_binlog_size_sum", labels) > 1000
    # the merger's bytes of that pump, read at scrape time
    m2 = DrainerMetrics(source_bytes=lambda: {n: merger.buffered_bytes(n) for n in merger.source_ids()})
    assert value(m2, "binlog_drainer_merger_buffered_bytes", labels) == merger.buffered_bytes(NODE) > 1000


def test_a_binlog_from_the_future_counts_as_zero_latency() -> None:
    m = DrainerMetrics()
    src = m.source(NODE)
    src.received(tso.compose(int(time.time() * 1000) + 60_000, 0), 10)  # pd-server's clock ahead of ours
    assert value(m, "binlog_drainer_binlog_reach_duration_time_sum", {"nodeID": NODE}) == 0


def test_for_drainer_reads_the_merger_and_the_sink_and_observes_the_sink(tmp_path: Path) -> None:
    merger = Merger(0)
    for node in ("p1", "p2"):
        merger.add_source(node)
    b = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=1, commit_ts=2)
    assert merger.put(MergeItem("p1", b, 700), timeout=1)
    assert merger.put(MergeItem("p2", b, 300), timeout=1)
    sink = SqliteSink(tmp_path / "down.db")
    m = DrainerMetrics.for_drainer(lambda: {"p1": tso.compose(1_700_000_000_000, 3)}, merger, sink)
    assert sink.observer is m.sink
    assert value(m, "binlog_drainer_merger_buffered_bytes", {"nodeID": "p1"}) == 700
    assert value(m, "binlog_drainer_merger_buffered_bytes", {"nodeID": "p2"}) == 300
    assert value(m, "binlog_drainer_queue_size", {"name": "syncer_input"}) == 1000
    assert value(m, "binlog_drainer_pump_position", {"nodeID": "p1"}) == 1_700_000_000_000
    assert value(m, "binlog_drainer_loader_inflight_bytes") == 0
    assert value(m, "binlog_drainer_disorder_binlog_count_total") == 0


def test_the_sqlite_sink_reports_execute_and_query_times(tmp_path: Path) -> None:
    schema = Schema()
    schema.create_db("d")
    create = schema.create_table("d", "t", [Column("id", "INT", nullable=False), Column("v", "INT")], ["id"])
    shape = schema.shape("d", "t")
    m = DrainerMetrics()
    sink = SqliteSink(tmp_path / "down.db")
    sink.set_observer(m.sink)
    reported: list[int] = []
    sink.start(reported.append)
    try:
        sink.add(Txn(10, ddl=create, size=10))
        sink.flush(30)
        assert value(m, "binlog_drainer_execute_duration_time_count") == 1  # the DDL
        sink.add(Txn(11, dmls=[ins(shape, 1, 1), ins(shape, 2, 2), upd(shape, (1, 1), (1, 5)), dele(shape, 2, 2)]))
        assert sink.inflight_bytes > 0 or reported[-1:] == [11]  # held until applied
        sink.flush(30)
    finally:
        sink.close()
    assert reported == [10, 11]
    assert sink.inflight_bytes == 0
    assert value(m, "binlog_drainer_execute_duration_time_count") == 2
    assert value(m, "binlog_drainer_query_duration_time_count", {"type": "exec"}) == 2
    assert value(m, "binlog_drainer_query_duration_time_count", {"type": "commit"}) == 2
    assert value(m, "binlog_drainer_execute_duration_time_sum") > 0


def test_events_are_counted_by_type_per_transaction() -> None:
    schema = Schema()
    schema.create_db("d")
    schema.create_table("d", "t", [Column("id", "INT", nullable=False), Column("v", "INT")], ["id"])
    shape = schema.shape("d", "t")
    m = DrainerMetrics()
    m.count_events([ins(shape, 1, 1), ins(shape, 2, 1), upd(shape, (1, 1), (1, 2)), dele(shape, 2, 1)], False)
    m.count_events([], True)
    m.count_events([], False)
    assert {t: value(m, "binlog_drainer_event_total", {"type": t}) for t in ("Insert", "Update", "Delete", "DDL")} == {
        "Insert": 2,
        "Update": 1,
        "Delete": 1,
        "DDL": 1,
    }
    m.saved(tso.compose(1_700_000_000_000, 0))
    assert value(m, "binlog_drainer_event_total", {"type": "savepoint"}) == 1
    assert value(m, "binlog_drainer_checkpoint_tso") == 1_700_000_000_000


def test_a_binlog_that_does_not_parse_is_an_unmarshal_binlog_error() -> None:
    merger = Merger(0)
    merger.add_source(NODE)
    puller = Puller(NODE, "127.0.0.1:1", 1, 0, merger)
    with pytest.raises(PullerError) as info:
        puller._accept(b"\x0a\x05garbage")
    assert error_type(info.value) == UNMARSHAL_BINLOG
    m = DrainerMetrics()
    m.fatal(info.value)
    m.fatal(PullerError("puller failed: a bug"))
    m.fatal(CodecError("x"))
    assert value(m, "binlog_drainer_error_count_total", {"type": UNMARSHAL_BINLOG}) == 1
    assert value(m, "binlog_drainer_error_count_total", {"type": "PullerError"}) == 1
    assert value(m, "binlog_drainer_error_count_total", {"type": "CodecError"}) == 1


def test_the_binlogfile_series_are_served_with_the_drainers() -> None:
    text = DrainerMetrics().render().decode()
    for name, tp in (
        ("binlog_binlogfile_write_binlog_size", "histogram"),
        ("binlog_binlogfile_write_binlog_duration_time", "histogram"),
        ("binlog_binlogfile_read_binlog_duration_time", "histogram"),
        ("binlog_binlogfile_corruption_binlog_count", "counter"),
    ):
        assert f"# TYPE {name} {tp}" in text, name
