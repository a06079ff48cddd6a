"""Row changes from pump value logs (pairing, windows, decoding with the schema of each version) and the
canonical values both readers produce; no Spark needed: the task functions are called directly."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common.pb import binlog_pb2
from common.schema.model import TableInfo
from common.schema.types import check_value
from spark_jobs.readers.files import canonical
from spark_jobs.readers.pump import find_pump_dirs, pump_ranges
from spark_jobs.readers.pump_changes import DecodePlan, Window, index_range, merge_index, scan_changes
from spark_jobs.readers.ranges import FileRange
from spark_jobs.rowjson import decode_row, encode_key, encode_row
from tests.spark.historyutil import HistoryBuilder
from tests.spark.vlogutil import txn_binlogs, write_pump_dir
from upstream.ddl import Column
from upstream.mutation import MutationLog
from upstream.workloads.gen import TYPES_COLUMNS, types_row

pytestmark = pytest.mark.spark


def _table(h: HistoryBuilder, name: str) -> TableInfo:
    return h.schema.table("d", name)


def _prewrite_value(h: HistoryBuilder, fill: MutationLog) -> bytes:
    return fill.prewrite_value(h.schema.version).SerializeToString()


def _ranges(tmp: Path, split: int = 1 << 20) -> list[FileRange]:
    return pump_ranges(find_pump_dirs([str(tmp / "p0"), str(tmp / "p1")]), split)


def test_pairing_windows_and_versions(tmp_path: Path) -> None:
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    cols = [Column("id", "VARCHAR(8)", nullable=False), Column("v", "INT")]
    h.add(lambda p: p.create_table("d", "t", cols, primary_key=["id"]), ts=2)
    t1 = _table(h, "t")
    m = MutationLog()
    m.insert(t1, 1, {"id": "a", "v": 1})
    m.insert(t1, 2, {"id": "b", "v": 2})
    pv1 = _prewrite_value(h, m)
    h.add(lambda p: p.add_column("d", "t", Column("x", "INT", default=7)), ts=30)
    t2 = _table(h, "t")
    m = MutationLog()
    m.update(t2, 1, {"id": "a", "v": 1, "x": 7}, {"id": "z", "v": 5, "x": 8})  # the key changes
    m.delete(t2, 2, {"id": "b", "v": 2, "x": 7})
    pv2 = _prewrite_value(h, m)
    unknown = MutationLog()
    unknown.insert(
        TableInfo(id=4242, name="gone", columns=t2.columns, indices=t2.indices), 9, {"id": "q", "v": 0, "x": 0}
    )
    pv3 = unknown.prewrite_value(h.schema.version).SerializeToString()

    write_pump_dir(tmp_path / "p0", [*txn_binlogs(10, 20, pv1), *txn_binlogs(40, 50, pv3)], node_id="p0")
    pending = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=60, prewrite_value=pv1)  # never committed
    rolled = txn_binlogs(70, 0, pv1)
    rolled[1].tp = binlog_pb2.Rollback
    write_pump_dir(tmp_path / "p1", [*txn_binlogs(31, 35, pv2), pending, *rolled], node_id="p1")

    ranges = _ranges(tmp_path)
    index = merge_index([index_range(r, None) for r in ranges])
    assert (len(index), index.prewrites, index.rollbacks) == (3, 5, 1)
    assert (index.lookup(10), index.lookup(31), index.lookup(60), index.lookup(70)) == (20, 35, 0, 0)
    jobs = tuple(j.to_json() for j in h.jobs)

    def changes(window: Window | None = None) -> list[tuple[object, ...]]:
        plan = DecodePlan(index, jobs, window or Window())
        out = []
        for r in ranges:
            out += list(scan_changes(r, plan, None))
        return sorted(out, key=lambda c: (c[3], c[4]))

    got = changes()
    assert [(c[3], c[4], c[5], c[6], c[8]) for c in got] == [
        (20, 0, "insert", '["a"]', None),
        (20, 1, "insert", '["b"]', None),
        (35, 0, "update", '["z"]', '["a"]'),
        (35, 1, "delete", '["b"]', None),
    ]
    assert json.loads(str(got[0][7])) == {"id": "a", "v": 1}  # read with the table of version 2: no x yet
    assert json.loads(str(got[2][7])) == {"id": "z", "v": 5, "x": 8}
    assert {c[2] for c in got} == {t1.id}
    assert [c[3] for c in changes(Window(start_ts=20))] == [35, 35]
    assert [c[3] for c in changes(Window(stop_ts=34))] == [20, 20]


def test_undecodable_transaction_is_reported_not_fatal(tmp_path: Path) -> None:
    from spark_jobs.readers.damage import DamageReport

    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    h.add(lambda p: p.create_table("d", "t", [Column("id", "INT", nullable=False)], primary_key=["id"]), ts=2)
    t = _table(h, "t")
    good, bad = MutationLog(), MutationLog()
    good.insert(t, 1, {"id": 1})
    bad.insert(TableInfo(id=999, name="x", columns=t.columns, indices=t.indices), 1, {"id": 1})
    write_pump_dir(
        tmp_path / "p0", [*txn_binlogs(10, 11, _prewrite_value(h, bad)), *txn_binlogs(12, 13, _prewrite_value(h, good))]
    )
    write_pump_dir(tmp_path / "p1", [])
    ranges = _ranges(tmp_path)
    index = merge_index([index_range(r, None) for r in ranges])
    plan = DecodePlan(index, tuple(j.to_json() for j in h.jobs))

    class Acc:
        def __init__(self) -> None:
            self.value = DamageReport()

        def add(self, r: DamageReport) -> None:
            self.value = self.value.merge(r)

    acc = Acc()
    got = [c for r in ranges for c in scan_changes(r, plan, acc)]  # type: ignore[arg-type]
    assert [(c[3], c[6]) for c in got] == [(13, "[1]")]
    assert acc.value.corrupted == 1
    assert "unknown table id 999" in acc.value.examples[0].reason


def test_every_column_type_round_trips_through_canonical_json() -> None:
    import random

    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    cols = [Column("id", "BIGINT", nullable=False), *(c for c, _ in TYPES_COLUMNS)]
    h.add(lambda p: p.create_table("d", "types", cols, primary_key=["id"]), ts=2)
    t = _table(h, "types")
    rng = random.Random(5)
    for i in range(50):
        raw = types_row(rng, i)
        row = tuple(check_value(c, raw[c.name]) if c.name in raw else None for c in t.columns)
        text = encode_row(t.columns, row)
        assert encode_row(t.columns, row) == text  # canonical: one text per value
        assert decode_row(t, text) == {c.name: v for c, v in zip(t.columns, row, strict=True)}
    assert encode_key(t.columns[:1], [7]) == "[7]"


def test_file_sink_values_become_the_stored_values() -> None:
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    cols = [
        Column("id", "INT", nullable=False),
        Column("e", "ENUM('red','green','blue')"),
        Column("s", "SET('a','b','c','d')"),
        Column("b", "BIT(12)"),
        Column("ts", "TIMESTAMP(3)"),
        Column("dec", "DECIMAL(10,2)"),
        Column("ch", "CHAR(4)"),
    ]
    h.add(lambda p: p.create_table("d", "t", cols, primary_key=["id"]), ts=2)
    t = _table(h, "t")
    c = {col.name: col for col in t.columns}
    assert canonical(c["e"], 2) == "green"
    assert canonical(c["s"], 0b1010) == "b,d"
    assert canonical(c["s"], 0) == ""
    assert canonical(c["b"], 0xABC) == b"\x0a\xbc"
    aware = dt.datetime(2021, 5, 6, 7, 8, 9, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert canonical(c["ts"], aware) == dt.datetime(2021, 5, 6, 5, 8, 9, 123000, tzinfo=dt.UTC)
    assert canonical(c["dec"], Decimal("1.5")) == Decimal("1.50")
    assert canonical(c["ch"], None) is None
    with pytest.raises(Exception, match="enum index 9"):
        canonical(c["e"], 9)


def test_replay_reports_a_corrupted_record_and_goes_on(spark: Any, tmp_path: Path) -> None:
    import sqlite3

    from common.vlog_record import HEADER_SIZE
    from spark_jobs.replay.job import ReplayOptions, run_replay
    from spark_jobs.replay.target import SqliteTarget

    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    h.add(lambda p: p.create_table("d", "t", [Column("id", "INT", nullable=False)], primary_key=["id"]), ts=2)
    t = _table(h, "t")
    binlogs = []
    for i in range(3):
        m = MutationLog()
        m.insert(t, i, {"id": i})
        binlogs += txn_binlogs(10 + 10 * i, 15 + 10 * i, _prewrite_value(h, m))
    ptrs = write_pump_dir(tmp_path / "p0", binlogs)
    write_pump_dir(tmp_path / "p1", [])
    _, offset = ptrs[2]  # the second transaction's prewrite
    with open(tmp_path / "p0" / "value" / "000000.vlog", "r+b") as f:
        f.seek(offset + HEADER_SIZE + 1)
        f.write(b"\xff\xff")
    lines: list[str] = []
    opts = ReplayOptions(SqliteTarget(tmp_path / "out.db"), pump_dirs=(str(tmp_path / "p0"), str(tmp_path / "p1")))
    summary = run_replay(spark, opts, h.jobs, out=lines.append)
    assert (summary.damage.corrupted, summary.changes, summary.written) == (1, 2, 2)
    assert "damaged input:" in lines[-1]
    assert f"000000.vlog offset {offset}" in lines[-1]
    conn = sqlite3.connect(tmp_path / "out.db")
    try:
        assert sorted(conn.execute('SELECT id FROM "d.t"')) == [(0,), (2,)]
    finally:
        conn.close()
